/* test_moe_config.c — Qwen3.5-MoE config.json parsing: the nested (qwen3_5_moe + text_config
 * qwen3_5_moe_text) and flat (qwen3_5_moe_text) layouts with the real field names, every MoE
 * field's validation with the field named, the refused Qwen3-Next switches, family mixes, and
 * the qc_config_to_json round trip. Expected values are written by hand from the JSON below
 * (the layout of the Qwen3.5-35B-A3B hub config, tiny dimensions). */
#include <check.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc_testjson.h"
#include "qc/qc_config.h"

/* ==== A base MoE config and a tiny JSON editor ==== */

static const char *BASE_MOE =
    "{\"architectures\":[\"Qwen3_5MoeForConditionalGeneration\"],\"model_type\":\"qwen3_5_moe\","
    "\"text_config\":{\"model_type\":\"qwen3_5_moe_text\",\"vocab_size\":256,\"hidden_size\":32,"
    "\"num_experts\":8,\"num_experts_per_tok\":2,\"moe_intermediate_size\":16,"
    "\"shared_expert_intermediate_size\":24,\"router_aux_loss_coef\":0.001,"
    "\"num_hidden_layers\":4,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":8,"
    "\"linear_num_key_heads\":2,\"linear_num_value_heads\":4,\"linear_key_head_dim\":8,"
    "\"linear_value_head_dim\":6,\"linear_conv_kernel_dim\":4,\"rms_norm_eps\":1e-06,"
    "\"hidden_act\":\"silu\",\"attention_bias\":false,\"max_position_embeddings\":4096,"
    "\"layer_types\":[\"linear_attention\",\"linear_attention\",\"linear_attention\","
    "\"full_attention\"],\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":10000000.0,"
    "\"partial_rotary_factor\":0.25,\"mrope_section\":[11,11,10],\"mrope_interleaved\":true},"
    "\"tie_word_embeddings\":false},\"tie_word_embeddings\":false,\"vision_config\":{\"depth\":1}}";

/* Apply edits "path=json" (or "path" alone to delete) to a JSON text; returns malloc'd text.
 * A leading "@flat" edit replaces the document by its text_config (a flat config). */
static char *edit(const char *base, const char *const *edits) {
    cJSON *root = cJSON_Parse(base);
    ck_assert_ptr_nonnull(root);
    for (int i = 0; edits && edits[i]; i++) {
        if (!strcmp(edits[i], "@flat")) {
            cJSON *tc = cJSON_DetachItemFromObjectCaseSensitive(root, "text_config");
            ck_assert_ptr_nonnull(tc);
            cJSON_Delete(root);
            root = tc;
            continue;
        }
        qc_test_json_edit(root, edits[i]);
    }
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

static qc_status parse_edit(const char *const *edits, qc_config *cfg, qc_err *err) {
    char *s = edit(BASE_MOE, edits);
    qc_err_clear(err);
    qc_status st = qc_config_parse(s, strlen(s), "m/config.json", cfg, err);
    free(s);
    return st;
}

#define EXPECT_ERR(code, want, ...)                                                         \
    do {                                                                                    \
        const char *ed_[] = {__VA_ARGS__, NULL};                                            \
        qc_config c_;                                                                       \
        qc_err e_;                                                                          \
        qc_status st_ = parse_edit(ed_, &c_, &e_);                                          \
        ck_assert_msg(st_ == (code), "status %s != %s (msg: %s)", qc_status_str(st_),       \
                      qc_status_str(code), e_.msg);                                         \
        ck_assert_msg(strstr(e_.msg, want) != NULL, "message \"%s\" lacks \"%s\"", e_.msg,  \
                      want);                                                                \
        ck_assert_int_eq(c_.n_experts, 0); /* nothing half-filled on error */               \
    } while (0)

#define EXPECT_OK(cfgp, ...)                                                                \
    do {                                                                                    \
        const char *ed_[] = {__VA_ARGS__, NULL};                                            \
        qc_err e_;                                                                          \
        qc_status st_ = parse_edit(ed_, (cfgp), &e_);                                       \
        ck_assert_msg(st_ == QC_OK, "parse: %s", e_.msg);                                   \
    } while (0)

static void check_moe_dims(const qc_config *c) {
    ck_assert_int_eq(c->n_experts, 8);
    ck_assert_int_eq(c->n_experts_per_tok, 2);
    ck_assert_int_eq(c->moe_intermediate_size, 16);
    ck_assert_int_eq(c->shared_expert_intermediate_size, 24);
    ck_assert_int_eq(c->intermediate_size, 0);
    ck_assert(qc_cfg_is_moe(c));
    ck_assert_int_eq(c->hidden_size, 32);
    ck_assert_int_eq(c->vocab_size, 256);
    ck_assert_int_eq(c->n_layers, 4);
    ck_assert_int_eq(c->layer_types[3], QC_LAYER_FULL);
    ck_assert_int_eq(c->lin_n_v_heads, 4);
    ck_assert_int_eq(c->tie_word_embeddings, 0);
}

/* ==== Accepted ==== */

START_TEST(test_nested_and_flat) {
    qc_config c;
    EXPECT_OK(&c, "text_config.router_aux_loss_coef=0.001");
    check_moe_dims(&c);
    ck_assert_int_eq(c.nested, 1);
    /* flat qwen3_5_moe_text, with and without the text-only architecture */
    EXPECT_OK(&c, "@flat");
    check_moe_dims(&c);
    ck_assert_int_eq(c.nested, 0);
    EXPECT_OK(&c, "@flat", "architectures=[\"Qwen3_5MoeForCausalLM\"]");
    check_moe_dims(&c);
    /* the nested text config without its own model_type (the wrapper decides) */
    EXPECT_OK(&c, "text_config.model_type");
    check_moe_dims(&c);
    /* fields Qwen3.5-MoE does not have, at the values that change nothing */
    EXPECT_OK(&c, "text_config.norm_topk_prob=true", "text_config.mlp_only_layers=[]",
              "text_config.decoder_sparse_step=1", "text_config.output_router_logits=false");
    check_moe_dims(&c);
    /* a stray dense width is ignored (not a field of the MoE class): 0 in the config */
    EXPECT_OK(&c, "text_config.intermediate_size=5120");
    ck_assert_int_eq(c.intermediate_size, 0);
    /* k == E and k == 1 are valid */
    EXPECT_OK(&c, "text_config.num_experts_per_tok=8");
    ck_assert_int_eq(c.n_experts_per_tok, 8);
    EXPECT_OK(&c, "text_config.num_experts=1", "text_config.num_experts_per_tok=1");
    ck_assert_int_eq(c.n_experts, 1);
}
END_TEST

START_TEST(test_round_trip) {
    qc_config a, b;
    qc_err e;
    EXPECT_OK(&a, "");
    char *js = NULL;
    ck_assert_int_eq(qc_config_to_json(&a, &js, &e), QC_OK);
    ck_assert_ptr_nonnull(strstr(js, "\"qwen3_5_moe_text\""));
    ck_assert_ptr_null(strstr(js, "\"intermediate_size\"")); /* only the MoE widths */
    ck_assert_msg(qc_config_parse(js, strlen(js), "syn", &b, &e) == QC_OK, "%s", e.msg);
    free(js);
    a.nested = b.nested = 0; /* to_json writes a flat config */
    ck_assert_int_eq(b.n_experts, 8);
    ck_assert_int_eq(b.n_experts_per_tok, 2);
    ck_assert_int_eq(b.moe_intermediate_size, 16);
    ck_assert_int_eq(b.shared_expert_intermediate_size, 24);
    ck_assert_int_eq(b.intermediate_size, 0);
    ck_assert_msg(memcmp(&a, &b, sizeof a) == 0, "round trip changed the config");
    /* a dense config still writes a dense config */
    qc_config d;
    ck_assert_int_eq(qc_config_preset("0.8b", &d, &e), QC_OK);
    ck_assert_int_eq(qc_config_to_json(&d, &js, &e), QC_OK);
    ck_assert_ptr_null(strstr(js, "num_experts"));
    ck_assert_ptr_nonnull(strstr(js, "\"qwen3_5_text\""));
    ck_assert_msg(qc_config_parse(js, strlen(js), "syn", &b, &e) == QC_OK, "%s", e.msg);
    ck_assert(!qc_cfg_is_moe(&b));
    free(js);
}
END_TEST

/* ==== Rejected ==== */

START_TEST(test_fields_rejected) {
    /* each required MoE field, nested and flat */
    EXPECT_ERR(QC_ERR_MISSING,
               "m/config.json: text_config.num_experts: missing (required by model_type "
               "qwen3_5_moe)",
               "text_config.num_experts");
    EXPECT_ERR(QC_ERR_MISSING, "m/config.json: text_config.num_experts_per_tok: missing",
               "text_config.num_experts_per_tok");
    EXPECT_ERR(QC_ERR_MISSING, "m/config.json: text_config.moe_intermediate_size: missing",
               "text_config.moe_intermediate_size");
    EXPECT_ERR(QC_ERR_MISSING,
               "m/config.json: shared_expert_intermediate_size: missing (required by model_type "
               "qwen3_5_moe_text)",
               "@flat", "shared_expert_intermediate_size");
    /* zero / negative / fractional / wrong type */
    EXPECT_ERR(QC_ERR_FORMAT,
               "m/config.json: text_config.num_experts: expected a positive integer, got 0",
               "text_config.num_experts=0");
    EXPECT_ERR(QC_ERR_FORMAT,
               "m/config.json: text_config.num_experts_per_tok: expected a positive integer, "
               "got -2",
               "text_config.num_experts_per_tok=-2");
    EXPECT_ERR(QC_ERR_FORMAT,
               "text_config.moe_intermediate_size: expected a positive integer, got 16.5",
               "text_config.moe_intermediate_size=16.5");
    EXPECT_ERR(QC_ERR_FORMAT,
               "shared_expert_intermediate_size: expected a positive integer, got a string",
               "text_config.shared_expert_intermediate_size=\"24\"");
    /* k > E */
    EXPECT_ERR(QC_ERR_FORMAT,
               "m/config.json: text_config.num_experts_per_tok: 9 is greater than num_experts 8",
               "text_config.num_experts_per_tok=9");
    EXPECT_ERR(QC_ERR_FORMAT, "num_experts: 100000 experts of width 16",
               "text_config.num_experts=100000");
    /* the Qwen3-Next switches that would change the math */
    EXPECT_ERR(QC_ERR_UNSUPPORTED,
               "m/config.json: text_config.norm_topk_prob: false is not supported: Qwen3.5-MoE "
               "always renormalises",
               "text_config.norm_topk_prob=false");
    EXPECT_ERR(QC_ERR_FORMAT, "text_config.norm_topk_prob: expected true or false, got 1",
               "text_config.norm_topk_prob=1");
    EXPECT_ERR(QC_ERR_UNSUPPORTED,
               "m/config.json: text_config.mlp_only_layers: 2 entries: Qwen3.5-MoE has a "
               "mixture-of-experts block in every layer",
               "text_config.mlp_only_layers=[0,3]");
    EXPECT_ERR(QC_ERR_FORMAT, "m/config.json: mlp_only_layers: expected an array, got 3",
               "@flat", "mlp_only_layers=3");
    EXPECT_ERR(QC_ERR_UNSUPPORTED, "m/config.json: text_config.decoder_sparse_step: 2:",
               "text_config.decoder_sparse_step=2");
    /* the dense width is not required, but the other dense fields still are */
    EXPECT_ERR(QC_ERR_MISSING, "m/config.json: text_config.hidden_size: missing",
               "text_config.hidden_size");
}
END_TEST

START_TEST(test_family_mixes) {
    EXPECT_ERR(QC_ERR_UNSUPPORTED,
               "m/config.json: text_config.model_type 'qwen3_5_text' does not match model_type "
               "'qwen3_5_moe'",
               "text_config.model_type=\"qwen3_5_text\"");
    EXPECT_ERR(QC_ERR_UNSUPPORTED,
               "m/config.json: architectures[0] 'Qwen3_5ForConditionalGeneration' is a dense "
               "architecture but model_type 'qwen3_5_moe' is mixture-of-experts",
               "architectures=[\"Qwen3_5ForConditionalGeneration\"]");
    EXPECT_ERR(QC_ERR_UNSUPPORTED, "'Qwen3NextForCausalLM' is a dense architecture", "@flat",
               "architectures=[\"Qwen3NextForCausalLM\"]");
    EXPECT_ERR(QC_ERR_UNSUPPORTED,
               "m/config.json: model_type 'qwen3_5_moe' is the multimodal wrapper and needs a "
               "text_config object",
               "@flat", "model_type=\"qwen3_5_moe\"");
    EXPECT_ERR(QC_ERR_UNSUPPORTED,
               "m/config.json: model_type 'qwen3_5_moe_text' is a flat text config but "
               "text_config is present",
               "model_type=\"qwen3_5_moe_text\"");
    EXPECT_ERR(QC_ERR_UNSUPPORTED,
               "text_config.model_type 'qwen3_moe' is not a Qwen3.5 text model (accepted: "
               "qwen3_5_moe_text)",
               "text_config.model_type=\"qwen3_moe\"");
    /* a dense Qwen3.5 config with MoE fields: which family was meant is unclear */
    EXPECT_ERR(QC_ERR_UNSUPPORTED,
               "m/config.json: num_experts: 8: mixture-of-experts layers in a dense Qwen3.5 "
               "config",
               "@flat", "model_type=\"qwen3_5_text\"", "architectures",
               "intermediate_size=64");
    /* Qwen3-Next MoE stays unsupported (its router has the norm_topk_prob switch) */
    EXPECT_ERR(QC_ERR_UNSUPPORTED, "Qwen3-Next MoE is not supported", "@flat",
               "model_type=\"qwen3_next\"", "architectures", "intermediate_size=64");
}
END_TEST

int main(void) {
    Suite *s = suite_create("moe_config");
    TCase *t = tcase_create("moe_config");
    tcase_add_test(t, test_nested_and_flat);
    tcase_add_test(t, test_round_trip);
    tcase_add_test(t, test_fields_rejected);
    tcase_add_test(t, test_family_mixes);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int nf = srunner_ntests_failed(r);
    srunner_free(r);
    return nf ? 1 : 0;
}
