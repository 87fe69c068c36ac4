/* qc_report_junit.h — JUnit XML (`--junit FILE`, Jenkins / Ant / GitLab subset), valid against
 * tests/data/junit.xsd and the Jenkins xunit plugin's JUnit schema (tests/data/junit-jenkins.xsd,
 * which allows no "skipped" on testsuites):
 *   <testsuites name="qwen-conform" tests failures errors time>
 *     <testsuite id name="<golden stem>" tests failures errors skipped time timestamp hostname>
 *       <properties> golden, tool_version, isa, policy[, stopped_early] </properties>
 *       <testcase classname="<stem>.<case>" name="<backend>.<mode>.<check>" time="...">
 *         <failure message="key numbers" type="conformance">summary + localisation</failure>
 *         | <error message="..." type="error">...</error> | <skipped message="..."/>
 *       <system-err> the run's warnings (policy overrides that can never match) </system-err>
 * One testsuite per golden file, in first-seen order. Written atomically. */
#ifndef QC_REPORT_JUNIT_H
#define QC_REPORT_JUNIT_H

#include "qc/qc_status.h"
#include "qc_report_results.h"

/* The report as a malloc'd string (NULL on OOM). */
char *qc_report_junit_string(const qc_results *r);
qc_status qc_report_junit_write(const char *path, const qc_results *r, qc_err *err);

#endif /* QC_REPORT_JUNIT_H */
