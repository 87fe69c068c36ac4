/* qc_bench_machine.c — the machine `qwen-conform bench` ran on and its limits: CPU vendor,
 * family / model / stepping (cpuid on x86, else /proc/cpuinfo), the ISA flags of interest,
 * online cores, MemTotal, the largest cache (sysfs); the weight bytes a decode step streams
 * and the flops of a prefill token; the two probes (streaming read of the weights, FMA loop;
 * best of 3 passes per repetition). See qc_bench_internal.h.
 */
#include "qc_bench_internal.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define BENCH_HAVE_CPUID 1
#endif

#include "qc/qc_config.h"
#include "qc/qc_probe.h"

double bench_now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* the run-queue delay (ns, the second field) of one /proc schedstat file, -1 unreadable */
static double schedstat_wait_ns(int fd) {
    char buf[128];
    ssize_t k = pread(fd, buf, sizeof buf - 1, 0);
    if (k <= 0) return -1;
    buf[k] = '\0';
    unsigned long long run = 0, wait = 0;
    return sscanf(buf, "%llu %llu", &run, &wait) == 2 ? (double)wait : -1;
}

double bench_rq_wait_s(int threads) {
    static int self_fd = -2;
    if (threads <= 1) {
        if (self_fd == -2) self_fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
        const double w = self_fd >= 0 ? schedstat_wait_ns(self_fd) : -1;
        return w < 0 ? 0 : 1e-9 * w;
    }
    /* several threads: the process's waits over all its threads, per thread of the figure */
    DIR *d = opendir("/proc/self/task");
    if (!d) return 0;
    double sum = 0;
    const struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[96];
        snprintf(path, sizeof path, "/proc/self/task/%.40s/schedstat", e->d_name);
        const int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        const double w = schedstat_wait_ns(fd);
        close(fd);
        sum += w > 0 ? w : 0;
    }
    closedir(d);
    return 1e-9 * sum / threads;
}

/* ===================================================================================== */
/* Machine facts                                                                          */
/* ===================================================================================== */

/* the value after "key<spaces>:" of a /proc/cpuinfo line, or NULL */
static char *cpuinfo_value(char *line, const char *key) {
    size_t n = strlen(key);
    if (strncmp(line, key, n)) return NULL;
    char *c = line + n;
    while (*c == ' ' || *c == '\t') c++;
    if (*c != ':') return NULL;
    c++;
    while (*c == ' ' || *c == '\t') c++;
    c[strcspn(c, "\n")] = '\0';
    return c;
}

/* the ISA flags that decide our kernels' speed, in this order, when present */
static void pick_flags(const char *all, char *out, size_t n) {
    static const char *const want[] = {"sse4_2", "avx", "avx2", "fma", "f16c", "avx512f",
                                       "avx512bw", "avx512vl", "avx512_bf16", "avx512_fp16",
                                       "avx512_vnni", "amx_bf16", "amx_tile", "asimd", "fphp",
                                       "asimdhp", "bf16", "sve", "sve2", "i8mm"};
    out[0] = '\0';
    size_t used = 0;
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        size_t wl = strlen(want[i]);
        for (const char *p = all; (p = strstr(p, want[i])) != NULL; p += wl) {
            int start = p == all || p[-1] == ' ', end = p[wl] == ' ' || p[wl] == '\0';
            if (start && end) {
                int w = snprintf(out + used, n - used, "%s%s", used ? " " : "", want[i]);
                if (w > 0 && (size_t)w < n - used) used += (size_t)w;
                break;
            }
        }
    }
}

static void read_cpuinfo(bench_machine_info *mc) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[8192];
    int got_flags = 0;
    while (fgets(line, sizeof line, f)) {
        char *v;
        if ((v = cpuinfo_value(line, "vendor_id")) && !mc->vendor[0]) snprintf(mc->vendor, sizeof mc->vendor, "%s", v);
        else if ((v = cpuinfo_value(line, "model name")) && !strcmp(mc->cpu, "unknown"))
            snprintf(mc->cpu, sizeof mc->cpu, "%s", v);
        else if ((v = cpuinfo_value(line, "cpu family")) && mc->family < 0) mc->family = atoi(v);
        else if ((v = cpuinfo_value(line, "model")) && mc->model < 0) mc->model = atoi(v);
        else if ((v = cpuinfo_value(line, "stepping")) && mc->stepping < 0) mc->stepping = atoi(v);
        else if (!got_flags && ((v = cpuinfo_value(line, "flags")) || (v = cpuinfo_value(line, "Features")))) {
            pick_flags(v, mc->flags, sizeof mc->flags);
            got_flags = 1;
        } else if ((v = cpuinfo_value(line, "CPU implementer")) && !mc->vendor[0])
            snprintf(mc->vendor, sizeof mc->vendor, "implementer %s", v);
    }
    fclose(f);
    if (mc->vendor[0] || mc->family >= 0) snprintf(mc->cpuid_src, sizeof mc->cpuid_src, "/proc/cpuinfo");
}

#ifdef BENCH_HAVE_CPUID
/* vendor and family / model / stepping from cpuid leaves 0 and 1 (the displayed values) */
static void read_cpuid(bench_machine_info *mc) {
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return;
    char v[13];
    memcpy(v, &b, 4);
    memcpy(v + 4, &d, 4);
    memcpy(v + 8, &c, 4);
    v[12] = '\0';
    snprintf(mc->vendor, sizeof mc->vendor, "%s", v);
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    int fam = (a >> 8) & 0xf, mod = (a >> 4) & 0xf;
    if (fam == 0xf) fam += (a >> 20) & 0xff;
    if (fam == 0x6 || fam >= 0xf) mod += ((a >> 16) & 0xf) << 4;
    mc->family = fam;
    mc->model = mod;
    mc->stepping = (int)(a & 0xf);
    snprintf(mc->cpuid_src, sizeof mc->cpuid_src, "cpuid");
}
#endif

/* the largest cache of cpu0 (sysfs cache/indexN/size: "32K", "1024K", "32M") */
static double largest_cache(void) {
    double best = 0;
    for (int i = 0; i < 8; i++) {
        char path[96], buf[64];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        if (fgets(buf, sizeof buf, f)) {
            char *end = NULL;
            double x = strtod(buf, &end);
            if (end && (*end == 'K' || *end == 'k')) x *= 1024;
            else if (end && *end == 'M') x *= 1024.0 * 1024;
            if (x > best) best = x;
        }
        fclose(f);
    }
    return best;
}

static double mem_total_gib(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    double kib = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "MemTotal:", 9)) {
            kib = atof(line + 9);
            break;
        }
    fclose(f);
    return kib / (1024.0 * 1024.0);
}

void bench_machine_info_read(bench_machine_info *mc) {
    memset(mc, 0, sizeof *mc);
    snprintf(mc->cpu, sizeof mc->cpu, "unknown");
    mc->family = mc->model = mc->stepping = -1;
    read_cpuinfo(mc);
#ifdef BENCH_HAVE_CPUID
    read_cpuid(mc);
#endif
    if (!mc->vendor[0]) snprintf(mc->vendor, sizeof mc->vendor, "unknown");
    if (!mc->cpuid_src[0]) snprintf(mc->cpuid_src, sizeof mc->cpuid_src, "unknown");
    mc->cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    mc->mem_gib = mem_total_gib();
    mc->cache_bytes = largest_cache();
}

/* ===================================================================================== */
/* The model's bytes and flops                                                            */
/* ===================================================================================== */

/* the weight tensors a decode step streams: every layer tensor, final norm, lm_head, as
 * (bytes, length) segments for qc_probe_bandwidth_gbs */
static int weight_segments(const qc_model *m, const void **seg_p, size_t *seg_n, int cap,
                           double *total) {
    int k = 0;
    *total = 0;
#define ADD(t)                                                                       \
    do {                                                                             \
        if ((t).ndim > 0 && (t).data && k < cap) {                                   \
            seg_p[k] = (t).data;                                                     \
            seg_n[k] = qc_tensor_bytes(&(t)); /* Q8_0: 34 bytes a block of 32 */     \
            *total += (double)seg_n[k];                                              \
            k++;                                                                     \
        }                                                                            \
    } while (0)
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const qc_layer_weights *w = &m->layers[l];
        ADD(w->input_norm); ADD(w->post_norm); ADD(w->mlp_gate); ADD(w->mlp_up); ADD(w->mlp_down);
        ADD(w->q_proj); ADD(w->k_proj); ADD(w->v_proj); ADD(w->o_proj); ADD(w->q_norm); ADD(w->k_norm);
        ADD(w->in_proj_qkv); ADD(w->in_proj_z); ADD(w->in_proj_b); ADD(w->in_proj_a); ADD(w->conv1d);
        ADD(w->dt_bias); ADD(w->A_log); ADD(w->lin_norm); ADD(w->out_proj);
        /* MoE: router, shared expert, and k of the E routed experts (a decode token reads k;
         * the first k slabs stand for them) */
        ADD(w->router); ADD(w->sh_gate); ADD(w->sh_up); ADD(w->sh_down); ADD(w->sh_expert_gate);
        const qc_tensor *ex[2] = {&w->exp_gate_up, &w->exp_down};
        for (int i = 0; i < 2; i++)
            if (ex[i]->ndim > 0 && ex[i]->data && k < cap && m->cfg.n_experts > 0) {
                seg_p[k] = ex[i]->data;
                seg_n[k] = qc_tensor_bytes(ex[i]) / (size_t)m->cfg.n_experts *
                           (size_t)m->cfg.n_experts_per_tok;
                *total += (double)seg_n[k++];
            }
    }
    ADD(m->final_norm);
    ADD(m->lm_head);
#undef ADD
    return k;
}

/* model flops per token of a dynamic prefill of n tokens (last logits only): projections,
 * causal attention at the mean context, the chunked delta rule (chunk 64) */
static double flops_per_token(const qc_model *m, int n) {
    const qc_config *c = &m->cfg;
    double f = 0;
    for (int l = 0; l < c->n_layers; l++) {
        const qc_layer_weights *w = &m->layers[l];
        const qc_tensor *mats[] = {&w->mlp_gate, &w->mlp_up, &w->mlp_down, &w->q_proj, &w->k_proj,
                                   &w->v_proj, &w->o_proj, &w->in_proj_qkv, &w->in_proj_z,
                                   &w->in_proj_b, &w->in_proj_a, &w->out_proj, &w->router,
                                   &w->sh_gate, &w->sh_up, &w->sh_down, &w->sh_expert_gate};
        for (size_t i = 0; i < sizeof mats / sizeof *mats; i++)
            if (mats[i]->ndim > 0) f += 2.0 * (double)qc_tensor_numel(mats[i]);
        if (c->n_experts > 0 && w->exp_gate_up.ndim > 0) /* MoE: k of the E routed experts */
            f += 2.0 * (double)(qc_tensor_numel(&w->exp_gate_up) + qc_tensor_numel(&w->exp_down)) *
                 c->n_experts_per_tok / c->n_experts;
        if (c->layer_types[l] == QC_LAYER_FULL) {
            f += 4.0 * c->n_heads * c->head_dim * (n + 1) / 2.0;
        } else {
            const double C = n < 64 ? n : 64, dk = c->lin_k_dim, dv = c->lin_v_dim;
            f += c->lin_n_v_heads * 2.0 * (2 * C * dk + C * dv + C * (dk + dv) / 2 + 3 * dk * dv);
        }
    }
    f += 2.0 * (double)c->vocab_size * c->hidden_size / n;
    return f;
}

void bench_machine(const bench_opts *o, const qc_model *m, bench_report *R, bench_run *run) {
    bench_machine_info_read(&R->mc);
    R->isa = qc_probe_isa();
    time_t tt = time(NULL);
    struct tm tmv;
    gmtime_r(&tt, &tmv);
    strftime(R->date, sizeof R->date, "%Y-%m-%dT%H:%M:%SZ", &tmv);
    double total = 0;
    run->nseg = weight_segments(m, run->seg_p, run->seg_n, MAX_SEGMENTS, &total);
    R->bytes_per_token = total;
    for (int i = 0; i < o->n_prompts; i++) R->flops_pp[i] = flops_per_token(m, o->prompts[i]);
    R->static_prompt = o->static_prompt;
    R->decode = o->decode;
    R->max_seq_len = o->max_seq_len;
    R->ref_prompt = o->ref_prompt;
    R->ref_decode = o->ref_decode;
    R->reps = o->reps;
    R->n_probe = o->n_threads;
    for (int t = 0; t < o->n_threads; t++)
        R->probe[t].threads = o->threads_list[t] > 0 ? o->threads_list[t] : qc_probe_max_threads();
}

/* ===================================================================================== */
/* Probes                                                                                 */
/* ===================================================================================== */

void bench_probe_sample(bench_report *R, const bench_run *run, int p, int rep, int reps) {
    bench_probe *pr = &R->probe[p];
    if (pr->n >= MAX_REPS) return;
    double bw = 0, pk = 0, dk = 0, ak = 0;
    int dot = 0, amx = 0; /* a backend runs the BF16 dot / AMX GEMM: its limit is that probe's */
    for (int b = 0; b < R->n_be; b++) {
        dot |= bench_uses_bf16_dot(R, b);
        amx |= bench_uses_amx(R, b);
    }
    /* best of 3 passes: a pass that lost its CPU to another process says nothing about the
     * machine's limit */
    for (int pass = 0; pass < 3; pass++) {
        double b = qc_probe_bandwidth_gbs(run->seg_p, run->seg_n, run->nseg, pr->threads),
               f = qc_probe_fma_gflops(pr->threads);
        bw = b > bw ? b : bw;
        pk = f > pk ? f : pk;
        if (dot) {
            const double d = qc_probe_bf16dot_gflops(pr->threads);
            dk = d > dk ? d : dk;
        }
        if (amx) {
            const double a = qc_probe_amx_gflops(pr->threads);
            ak = a > ak ? a : ak;
        }
    }
    pr->bw[pr->n] = bw;
    pr->peak[pr->n] = pk;
    pr->dot[pr->n] = dk;
    pr->amx[pr->n] = ak;
    pr->n++;
    fprintf(stderr, "%s: rep %d/%d (%d threads): bandwidth %.1f GB/s, FMA peak %.0f GFLOP/s\n",
            PROG, rep + 1, reps, pr->threads, bw, pk);
}
