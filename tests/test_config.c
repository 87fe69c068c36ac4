/* test_config.c — config.json parsing: every accepted variant and every malformed class, with
 * the exact field named in the message. Expected values are written by hand from the spec
 * tables (qwen35-architecture.md section 2) and the JSON texts below. */
#include <check.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qc_testjson.h"
#include "qc/qc_config.h"

/* ==== A base config and a tiny JSON editor ==== */

/* Real-style nested config (layout of the Hub files), 4 layers, rope_parameters. */
static const char *BASE_NESTED =
    "{\"architectures\":[\"Qwen3_5ForConditionalGeneration\"],\"model_type\":\"qwen3_5\","
    "\"text_config\":{\"vocab_size\":512,\"hidden_size\":64,\"intermediate_size\":128,"
    "\"num_hidden_layers\":4,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":16,"
    "\"linear_num_key_heads\":2,\"linear_num_value_heads\":4,\"linear_key_head_dim\":16,"
    "\"linear_value_head_dim\":8,\"linear_conv_kernel_dim\":4,\"rms_norm_eps\":1e-06,"
    "\"hidden_act\":\"silu\",\"attention_bias\":false,\"max_position_embeddings\":4096,"
    "\"layer_types\":[\"linear_attention\",\"linear_attention\",\"linear_attention\","
    "\"full_attention\"],"
    "\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":10000000.0,"
    "\"partial_rotary_factor\":0.25,\"mrope_section\":[11,11,10],\"mrope_interleaved\":true},"
    "\"tie_word_embeddings\":true},"
    "\"tie_word_embeddings\":true,\"vision_config\":{\"depth\":1}}";

/* Apply edits "path=json" (or "path" alone to delete) to a JSON text; returns malloc'd text. */
static char *edit(const char *base, const char *const *edits) {
    cJSON *root = cJSON_Parse(base);
    ck_assert_ptr_nonnull(root);
    for (int i = 0; edits && edits[i]; i++) {
        qc_test_json_edit(root, edits[i]);
    }
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

/* Parse base+edits; check status and (if non-NULL) that the message contains `want`. */
static qc_status parse_edit(const char *base, const char *const *edits, qc_config *cfg,
                            qc_err *err) {
    char *s = edit(base, edits);
    qc_err_clear(err);
    qc_status st = qc_config_parse(s, strlen(s), "m/config.json", cfg, err);
    free(s);
    return st;
}

#define EXPECT_ERR(base, code, want, ...)                                                   \
    do {                                                                                    \
        const char *ed_[] = {__VA_ARGS__, NULL};                                            \
        qc_config c_;                                                                       \
        qc_err e_;                                                                          \
        qc_status st_ = parse_edit(base, ed_, &c_, &e_);                                    \
        ck_assert_msg(st_ == (code), "status %s != %s (msg: %s)", qc_status_str(st_),       \
                      qc_status_str(code), e_.msg);                                         \
        ck_assert_msg(strstr(e_.msg, want) != NULL, "message \"%s\" lacks \"%s\"", e_.msg,  \
                      want);                                                                \
    } while (0)

/* Flat text config (Qwen3_5ForCausalLM style) with legacy top-level rope fields. */
static char *flat_legacy(void) {
    const char *ed[] = {"text_config", "vision_config", "tie_word_embeddings", NULL};
    char *nested = edit(BASE_NESTED, NULL);
    cJSON *root = cJSON_Parse(nested);
    free(nested);
    cJSON *tc = cJSON_DetachItemFromObjectCaseSensitive(root, "text_config");
    cJSON_Delete(root);
    cJSON *rp = cJSON_DetachItemFromObjectCaseSensitive(tc, "rope_parameters");
    cJSON_Delete(rp);
    cJSON_AddNumberToObject(tc, "rope_theta", 500000.0);
    cJSON_AddNumberToObject(tc, "partial_rotary_factor", 0.5);
    char *s = cJSON_PrintUnformatted(tc);
    cJSON_Delete(tc);
    (void)ed;
    return s;
}

/* ==== Accepted variants ==== */

START_TEST(test_nested_rope_parameters) {
    qc_config c;
    qc_err e;
    ck_assert_int_eq(parse_edit(BASE_NESTED, NULL, &c, &e), QC_OK);
    ck_assert_int_eq(c.nested, 1);
    ck_assert_int_eq(c.vocab_size, 512);
    ck_assert_int_eq(c.hidden_size, 64);
    ck_assert_int_eq(c.intermediate_size, 128);
    ck_assert_int_eq(c.n_layers, 4);
    ck_assert_int_eq(c.n_heads, 4);
    ck_assert_int_eq(c.n_kv_heads, 2);
    ck_assert_int_eq(c.head_dim, 16);
    ck_assert_int_eq(c.lin_n_k_heads, 2);
    ck_assert_int_eq(c.lin_n_v_heads, 4);
    ck_assert_int_eq(c.lin_k_dim, 16);
    ck_assert_int_eq(c.lin_v_dim, 8);
    ck_assert_int_eq(c.conv_kernel, 4);
    ck_assert_double_eq(c.rms_eps, 1e-6);
    ck_assert_double_eq(c.rope_theta, 1e7);
    ck_assert_double_eq(c.partial_rotary_factor, 0.25);
    ck_assert_int_eq(c.rotary_dim, 4); /* 16 * 0.25 */
    ck_assert_int_eq(c.tie_word_embeddings, 1);
    ck_assert_int_eq(c.max_position_embeddings, 4096);
    ck_assert_int_eq(c.layer_types[0], QC_LAYER_LINEAR);
    ck_assert_int_eq(c.layer_types[2], QC_LAYER_LINEAR);
    ck_assert_int_eq(c.layer_types[3], QC_LAYER_FULL);
    ck_assert_int_eq(qc_cfg_key_dim(&c), 32);
    ck_assert_int_eq(qc_cfg_value_dim(&c), 32);
    ck_assert_int_eq(qc_cfg_conv_dim(&c), 96);
}
END_TEST

START_TEST(test_not_nul_terminated) {
    /* the parser gets a length; bytes after it must be ignored */
    size_t n = strlen(BASE_NESTED);
    char *buf = malloc(n + 16);
    memcpy(buf, BASE_NESTED, n);
    memcpy(buf + n, "garbage}}}}XXXX", 16);
    qc_config c;
    qc_err e;
    ck_assert_int_eq(qc_config_parse(buf, n, "m/config.json", &c, &e), QC_OK);
    ck_assert_int_eq(c.hidden_size, 64);
    free(buf);
}
END_TEST

START_TEST(test_flat_legacy_rope) {
    char *s = flat_legacy();
    qc_config c;
    qc_err e;
    ck_assert_int_eq(qc_config_parse(s, strlen(s), "m/config.json", &c, &e), QC_OK);
    ck_assert_int_eq(c.nested, 0);
    ck_assert_double_eq(c.rope_theta, 500000.0);
    ck_assert_double_eq(c.partial_rotary_factor, 0.5);
    ck_assert_int_eq(c.rotary_dim, 8);
    ck_assert_int_eq(c.tie_word_embeddings, 1); /* text-level field of the flat config */
    /* flat: messages carry no "text_config." prefix */
    const char *ed[] = {"hidden_size", NULL};
    ck_assert_int_eq(parse_edit(s, ed, &c, &e), QC_ERR_MISSING);
    ck_assert_str_eq(e.msg, "m/config.json: hidden_size: missing");
    free(s);
}
END_TEST

START_TEST(test_rope_defaults_and_top_level) {
    qc_config c;
    qc_err e;
    /* no rope fields anywhere: theta 10000, partial 0.25 (HF post_init) */
    const char *none[] = {"text_config.rope_parameters", NULL};
    ck_assert_int_eq(parse_edit(BASE_NESTED, none, &c, &e), QC_OK);
    ck_assert_double_eq(c.rope_theta, 10000.0);
    ck_assert_double_eq(c.partial_rotary_factor, 0.25);
    ck_assert_int_eq(c.rotary_dim, 4);
    /* legacy fields at the top level of a nested config */
    const char *top[] = {"text_config.rope_parameters", "rope_theta=123456.0",
                         "partial_rotary_factor=0.5", NULL};
    ck_assert_int_eq(parse_edit(BASE_NESTED, top, &c, &e), QC_OK);
    ck_assert_double_eq(c.rope_theta, 123456.0);
    ck_assert_int_eq(c.rotary_dim, 8);
    /* rope_parameters wins over a legacy text field */
    const char *both[] = {"text_config.rope_theta=5.0", NULL};
    ck_assert_int_eq(parse_edit(BASE_NESTED, both, &c, &e), QC_OK);
    ck_assert_double_eq(c.rope_theta, 1e7);
    /* a partial rope_parameters falls back per field */
    const char *part[] = {"text_config.rope_parameters.partial_rotary_factor",
                          "text_config.partial_rotary_factor=1.0", NULL};
    ck_assert_int_eq(parse_edit(BASE_NESTED, part, &c, &e), QC_OK);
    ck_assert_double_eq(c.rope_theta, 1e7);
    ck_assert_int_eq(c.rotary_dim, 16);
}
END_TEST

START_TEST(test_layer_types_interval) {
    qc_config c;
    qc_err e;
    /* interval 3 over 7 layers: full at 2 and 5 */
    const char *iv[] = {"text_config.layer_types", "text_config.full_attention_interval=3",
                        "text_config.num_hidden_layers=7", NULL};
    ck_assert_int_eq(parse_edit(BASE_NESTED, iv, &c, &e), QC_OK);
    int want3[7] = {0, 0, 1, 0, 0, 1, 0};
    for (int i = 0; i < 7; i++) ck_assert_int_eq(c.layer_types[i], want3[i]);
    /* no layer_types, no interval: default 4 -> full at 3 and 7 of 8 */
    const char *dflt[] = {"text_config.layer_types", "text_config.num_hidden_layers=8", NULL};
    ck_assert_int_eq(parse_edit(BASE_NESTED, dflt, &c, &e), QC_OK);
    int want4[8] = {0, 0, 0, 1, 0, 0, 0, 1};
    for (int i = 0; i < 8; i++) ck_assert_int_eq(c.layer_types[i], want4[i]);
    /* explicit layer_types wins over the interval */
    const char *lt[] = {"text_config.full_attention_interval=1",
                        "text_config.layer_types=[\"full_attention\",\"linear_attention\","
                        "\"full_attention\",\"linear_attention\"]",
                        NULL};
    ck_assert_int_eq(parse_edit(BASE_NESTED, lt, &c, &e), QC_OK);
    ck_assert_int_eq(c.layer_types[0], QC_LAYER_FULL);
    ck_assert_int_eq(c.layer_types[1], QC_LAYER_LINEAR);
    ck_assert_int_eq(c.layer_types[2], QC_LAYER_FULL);
    ck_assert_int_eq(c.layer_types[3], QC_LAYER_LINEAR);
}
END_TEST

START_TEST(test_tie_rules) {
    qc_config c;
    qc_err e;
    const char *top_only[] = {"text_config.tie_word_embeddings", NULL};
    ck_assert_int_eq(parse_edit(BASE_NESTED, top_only, &c, &e), QC_OK);
    ck_assert_int_eq(c.tie_word_embeddings, 1);
    const char *absent[] = {"text_config.tie_word_embeddings", "tie_word_embeddings", NULL};
    ck_assert_int_eq(parse_edit(BASE_NESTED, absent, &c, &e), QC_OK);
    ck_assert_int_eq(c.tie_word_embeddings, 0); /* HF class default */
    const char *text_wins[] = {"text_config.tie_word_embeddings=false", "tie_word_embeddings=true",
                               NULL};
    ck_assert_int_eq(parse_edit(BASE_NESTED, text_wins, &c, &e), QC_OK);
    ck_assert_int_eq(c.tie_word_embeddings, 0);
    const char *text_true[] = {"text_config.tie_word_embeddings=true", "tie_word_embeddings=false",
                               NULL};
    ck_assert_int_eq(parse_edit(BASE_NESTED, text_true, &c, &e), QC_OK);
    ck_assert_int_eq(c.tie_word_embeddings, 1);
}
END_TEST

START_TEST(test_defaults_head_dim_eps) {
    qc_config c;
    qc_err e;
    const char *ed[] = {"text_config.head_dim", "text_config.rms_norm_eps",
                        "text_config.max_position_embeddings", "text_config.head_dim=null", NULL};
    ck_assert_int_eq(parse_edit(BASE_NESTED, ed, &c, &e), QC_OK);
    ck_assert_int_eq(c.head_dim, 16); /* 64 / 4 */
    ck_assert_double_eq(c.rms_eps, 1e-6);
    ck_assert_int_eq(c.max_position_embeddings, 32768);
}
END_TEST

START_TEST(test_presets) {
    qc_config c;
    qc_err e;
    ck_assert_int_eq(qc_config_preset("0.8b", &c, &e), QC_OK);
    ck_assert_int_eq(c.vocab_size, 248320);
    ck_assert_int_eq(c.hidden_size, 1024);
    ck_assert_int_eq(c.intermediate_size, 3584);
    ck_assert_int_eq(c.n_layers, 24);
    ck_assert_int_eq(c.n_heads, 8);
    ck_assert_int_eq(c.n_kv_heads, 2);
    ck_assert_int_eq(c.head_dim, 256);
    ck_assert_int_eq(c.lin_n_k_heads, 16);
    ck_assert_int_eq(c.lin_n_v_heads, 16);
    ck_assert_int_eq(c.rotary_dim, 64);
    ck_assert_double_eq(c.rope_theta, 1e7);
    ck_assert_int_eq(c.tie_word_embeddings, 1);
    ck_assert_int_eq(qc_cfg_conv_dim(&c), 6144); /* spec 3.5 */
    for (int i = 0; i < 24; i++) ck_assert_int_eq(c.layer_types[i], (i % 4 == 3));
    ck_assert_int_eq(qc_config_preset("2b", &c, &e), QC_OK);
    ck_assert_int_eq(c.hidden_size, 2048);
    ck_assert_int_eq(c.intermediate_size, 6144);
    ck_assert_int_eq(qc_cfg_conv_dim(&c), 6144);
    ck_assert_int_eq(qc_config_preset("4b", &c, &e), QC_OK);
    ck_assert_int_eq(c.hidden_size, 2560);
    ck_assert_int_eq(c.n_layers, 32);
    ck_assert_int_eq(c.lin_n_v_heads, 32);
    ck_assert_int_eq(qc_cfg_conv_dim(&c), 8192);
    ck_assert_int_eq(c.tie_word_embeddings, 1);
    ck_assert_int_eq(qc_config_preset("9b", &c, &e), QC_OK);
    ck_assert_int_eq(c.hidden_size, 4096);
    ck_assert_int_eq(c.intermediate_size, 12288);
    ck_assert_int_eq(c.n_heads, 16);
    ck_assert_int_eq(c.n_kv_heads, 4);
    ck_assert_int_eq(c.tie_word_embeddings, 0);
    ck_assert_int_eq(qc_config_preset("7b", &c, &e), QC_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(e.msg, "\"7b\""));
    ck_assert_ptr_nonnull(strstr(e.msg, "2.4t-a95b"));
}
END_TEST

/* Qwen3.5/3.6/3.8-27B and Qwen3.8-2.4T-A95B (docs/qwen35-model.md 2.6, with the sources). */
START_TEST(test_presets_27b_2_4t) {
    qc_config c;
    qc_err e;
    ck_assert_int_eq(qc_config_preset("27b", &c, &e), QC_OK);
    ck_assert_int_eq(c.vocab_size, 248320);
    ck_assert_int_eq(c.hidden_size, 5120);
    ck_assert_int_eq(c.intermediate_size, 17408);
    ck_assert_int_eq(c.n_layers, 64);
    ck_assert_int_eq(c.n_heads, 24);
    ck_assert_int_eq(c.n_kv_heads, 4);
    ck_assert_int_eq(c.head_dim, 256);
    ck_assert_int_eq(c.lin_n_k_heads, 16);
    ck_assert_int_eq(c.lin_n_v_heads, 48); /* r = 3 */
    ck_assert_int_eq(c.lin_k_dim, 128);
    ck_assert_int_eq(c.lin_v_dim, 128);
    ck_assert_int_eq(qc_cfg_conv_dim(&c), 10240);
    ck_assert_int_eq(c.tie_word_embeddings, 0);
    ck_assert_int_eq(qc_cfg_is_moe(&c), 0);
    int full = 0;
    for (int i = 0; i < 64; i++) full += c.layer_types[i] == QC_LAYER_FULL;
    ck_assert_int_eq(full, 16);
    ck_assert_int_eq(c.layer_types[63], QC_LAYER_FULL);
    ck_assert_int_eq(qc_config_preset("2.4t-a95b", &c, &e), QC_OK);
    ck_assert_int_eq(c.vocab_size, 248320);
    ck_assert_int_eq(c.hidden_size, 8192);
    ck_assert_int_eq(c.intermediate_size, 0);
    ck_assert_int_eq(c.n_layers, 92);
    ck_assert_int_eq(c.n_heads, 64);
    ck_assert_int_eq(c.n_kv_heads, 4);
    ck_assert_int_eq(c.head_dim, 256);
    ck_assert_int_eq(c.lin_n_k_heads, 16);
    ck_assert_int_eq(c.lin_n_v_heads, 128); /* r = 8 */
    ck_assert_int_eq(qc_cfg_conv_dim(&c), 20480);
    ck_assert_int_eq(c.n_experts, 512);
    ck_assert_int_eq(c.n_experts_per_tok, 10);
    ck_assert_int_eq(c.moe_intermediate_size, 2048);
    ck_assert_int_eq(c.shared_expert_intermediate_size, 2048);
    ck_assert_int_eq(c.tie_word_embeddings, 0);
    full = 0;
    for (int i = 0; i < 92; i++) full += c.layer_types[i] == QC_LAYER_FULL;
    ck_assert_int_eq(full, 23); /* 69 linear + 23 full */
    /* what the presets write is what the parser reads back */
    char *json = NULL;
    ck_assert_int_eq(qc_config_to_json(&c, &json, &e), QC_OK);
    qc_config back;
    ck_assert_int_eq(qc_config_parse(json, strlen(json), "p/config.json", &back, &e), QC_OK);
    free(json);
    ck_assert_int_eq(back.n_layers, 92);
    ck_assert_int_eq(back.lin_n_v_heads, 128);
    ck_assert_int_eq(back.moe_intermediate_size, 2048);
}
END_TEST

/* attn_output_gate and output_gate_type (docs/qwen35-model.md 2.2): the values this toolkit
 * computes load, every other value is refused naming file, field and value. Fails if either
 * field is ignored. */
START_TEST(test_gates) {
    qc_config c;
    qc_err e;
    const char *ok[] = {"text_config.output_gate_type=\"swish\"",
                        "text_config.output_gate_type=\"silu\"",
                        "text_config.output_gate_type=null", "text_config.attn_output_gate=true",
                        "text_config.attn_output_gate=null", NULL};
    for (int i = 0; ok[i]; i++) {
        const char *ed[] = {ok[i], NULL};
        ck_assert_msg(parse_edit(BASE_NESTED, ed, &c, &e) == QC_OK, "%s: %s", ok[i], e.msg);
    }
    EXPECT_ERR(BASE_NESTED, QC_ERR_UNSUPPORTED,
               "m/config.json: text_config.output_gate_type: 'sigmoid' is not supported (swish, silu)",
               "text_config.output_gate_type=\"sigmoid\"");
    EXPECT_ERR(BASE_NESTED, QC_ERR_UNSUPPORTED, "output_gate_type: 'Swish' is not supported",
               "text_config.output_gate_type=\"Swish\"");
    EXPECT_ERR(BASE_NESTED, QC_ERR_FORMAT,
               "m/config.json: text_config.output_gate_type: expected a string (swish, silu), got 1",
               "text_config.output_gate_type=1");
    EXPECT_ERR(BASE_NESTED, QC_ERR_UNSUPPORTED,
               "m/config.json: text_config.attn_output_gate: false is not supported",
               "text_config.attn_output_gate=false");
    EXPECT_ERR(BASE_NESTED, QC_ERR_FORMAT,
               "m/config.json: text_config.attn_output_gate: expected true or false, got a string",
               "text_config.attn_output_gate=\"yes\"");
    /* flat: the field path has no prefix */
    char *flat = flat_legacy();
    EXPECT_ERR(flat, QC_ERR_UNSUPPORTED,
               "m/config.json: output_gate_type: 'sigmoid' is not supported (swish, silu)",
               "output_gate_type=\"sigmoid\"");
    const char *sw[] = {"output_gate_type=\"swish\"", "attn_output_gate=true", NULL};
    ck_assert_int_eq(parse_edit(flat, sw, &c, &e), QC_OK);
    /* a MoE config is checked the same way (Qwen3.8-2.4T-A95B is qwen3_5_moe_text) */
    const char *moe[] = {"text_config.model_type=\"qwen3_5_moe_text\"",
                         "model_type=\"qwen3_5_moe\"",
                         "architectures=[\"Qwen3_5MoeForConditionalGeneration\"]",
                         "text_config.intermediate_size", "text_config.num_experts=8",
                         "text_config.num_experts_per_tok=2",
                         "text_config.moe_intermediate_size=16",
                         "text_config.shared_expert_intermediate_size=16",
                         "text_config.output_gate_type=\"sigmoid\"", NULL};
    ck_assert_int_eq(parse_edit(BASE_NESTED, moe, &c, &e), QC_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(e.msg, "text_config.output_gate_type: 'sigmoid'"));
    moe[8] = "text_config.output_gate_type=\"swish\"";
    ck_assert_msg(parse_edit(BASE_NESTED, moe, &c, &e) == QC_OK, "%s", e.msg);
    free(flat);
}
END_TEST

/* ==== Malformed ==== */

START_TEST(test_bad_json) {
    qc_config c;
    qc_err e;
    const char *bad = "{\"text_config\": {\"hidden_size\": 64,}";
    ck_assert_int_eq(qc_config_parse(bad, strlen(bad), "m/config.json", &c, &e), QC_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(e.msg, "m/config.json: not well-formed JSON"));
    ck_assert_int_eq(qc_config_parse("", 0, "m/config.json", &c, &e), QC_ERR_FORMAT);
    ck_assert_int_eq(qc_config_parse("[1,2]", 5, "m/config.json", &c, &e), QC_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(e.msg, "not a JSON object"));
    ck_assert_int_eq(qc_config_parse("{} {}", 5, "m/config.json", &c, &e), QC_ERR_FORMAT);
    ck_assert_int_eq(qc_config_parse("{\"a\":1\0}", 8, "m/config.json", &c, &e), QC_ERR_FORMAT);
    EXPECT_ERR(BASE_NESTED, QC_ERR_FORMAT, "m/config.json: text_config: expected an object",
               "text_config=[1]");
}
END_TEST

START_TEST(test_bad_fields) {
    EXPECT_ERR(BASE_NESTED, QC_ERR_MISSING, "m/config.json: text_config.hidden_size: missing",
               "text_config.hidden_size");
    EXPECT_ERR(BASE_NESTED, QC_ERR_MISSING, "m/config.json: text_config.linear_conv_kernel_dim: missing",
               "text_config.linear_conv_kernel_dim");
    EXPECT_ERR(BASE_NESTED, QC_ERR_FORMAT,
               "m/config.json: text_config.hidden_size: expected a positive integer, got a string",
               "text_config.hidden_size=\"64\"");
    EXPECT_ERR(BASE_NESTED, QC_ERR_FORMAT,
               "m/config.json: text_config.num_attention_heads: expected a positive integer, got 0",
               "text_config.num_attention_heads=0");
    EXPECT_ERR(BASE_NESTED, QC_ERR_FORMAT,
               "m/config.json: text_config.vocab_size: expected a positive integer, got -3",
               "text_config.vocab_size=-3");
    EXPECT_ERR(BASE_NESTED, QC_ERR_FORMAT,
               "m/config.json: text_config.intermediate_size: expected a positive integer, got 2.5",
               "text_config.intermediate_size=2.5");
    EXPECT_ERR(BASE_NESTED, QC_ERR_FORMAT,
               "m/config.json: text_config.head_dim: expected a positive integer",
               "text_config.head_dim=1e12");
    EXPECT_ERR(BASE_NESTED, QC_ERR_FORMAT, "m/config.json: text_config.rms_norm_eps: expected a positive number",
               "text_config.rms_norm_eps=0");
    EXPECT_ERR(BASE_NESTED, QC_ERR_FORMAT,
               "m/config.json: text_config.tie_word_embeddings: expected true or false, got 1",
               "text_config.tie_word_embeddings=1");
    EXPECT_ERR(BASE_NESTED, QC_ERR_FORMAT,
               "m/config.json: tie_word_embeddings: expected true or false, got a string",
               "text_config.tie_word_embeddings", "tie_word_embeddings=\"yes\"");
}
END_TEST

START_TEST(test_bad_consistency) {
    EXPECT_ERR(BASE_NESTED, QC_ERR_FORMAT,
               "m/config.json: text_config.linear_num_value_heads: 3 is not a multiple of "
               "linear_num_key_heads 2",
               "text_config.linear_num_value_heads=3");
    EXPECT_ERR(BASE_NESTED, QC_ERR_FORMAT,
               "m/config.json: text_config.num_attention_heads: 6 is not a multiple of "
               "num_key_value_heads 4",
               "text_config.num_attention_heads=6", "text_config.num_key_value_heads=4");
    /* 16 * 0.3125 = 5: odd rotary dim */
    EXPECT_ERR(BASE_NESTED, QC_ERR_FORMAT,
               "m/config.json: text_config.rope_parameters.partial_rotary_factor: 0.3125 x head_dim "
               "16 gives rotary dim 5",
               "text_config.rope_parameters.partial_rotary_factor=0.3125");
    EXPECT_ERR(BASE_NESTED, QC_ERR_FORMAT,
               "m/config.json: text_config.rope_parameters.partial_rotary_factor: 1.5 is greater than 1",
               "text_config.rope_parameters.partial_rotary_factor=1.5");
    EXPECT_ERR(BASE_NESTED, QC_ERR_FORMAT,
               "m/config.json: partial_rotary_factor: 0.03125 x head_dim 16 gives rotary dim 0",
               "text_config.rope_parameters", "partial_rotary_factor=0.03125");
    EXPECT_ERR(BASE_NESTED, QC_ERR_FORMAT,
               "m/config.json: text_config.rope_parameters.rope_theta: expected a positive number, got -1",
               "text_config.rope_parameters.rope_theta=-1");
    EXPECT_ERR(BASE_NESTED, QC_ERR_FORMAT,
               "m/config.json: text_config.rope_parameters: expected an object",
               "text_config.rope_parameters=7");
    EXPECT_ERR(BASE_NESTED, QC_ERR_FORMAT,
               "m/config.json: text_config.layer_types: 4 entries != num_hidden_layers 5",
               "text_config.num_hidden_layers=5");
    EXPECT_ERR(BASE_NESTED, QC_ERR_FORMAT,
               "m/config.json: text_config.layer_types[1]: a string (\"mamba\") is not",
               "text_config.layer_types=[\"full_attention\",\"mamba\",\"full_attention\","
               "\"full_attention\"]");
    EXPECT_ERR(BASE_NESTED, QC_ERR_FORMAT, "m/config.json: text_config.layer_types: expected an array",
               "text_config.layer_types={}");
    EXPECT_ERR(BASE_NESTED, QC_ERR_UNSUPPORTED,
               "m/config.json: text_config.num_hidden_layers: 300 exceeds QC_MAX_LAYERS 256",
               "text_config.num_hidden_layers=300", "text_config.layer_types");
    EXPECT_ERR(BASE_NESTED, QC_ERR_FORMAT,
               "m/config.json: text_config.full_attention_interval: expected a positive integer",
               "text_config.layer_types", "text_config.full_attention_interval=0");
    EXPECT_ERR(BASE_NESTED, QC_ERR_UNSUPPORTED, "m/config.json: text_config.hidden_act: a string (\"gelu\")",
               "text_config.hidden_act=\"gelu\"");
    EXPECT_ERR(BASE_NESTED, QC_ERR_UNSUPPORTED, "m/config.json: text_config.attention_bias: true",
               "text_config.attention_bias=true");
    EXPECT_ERR(BASE_NESTED, QC_ERR_UNSUPPORTED,
               "m/config.json: text_config.rope_parameters.rope_type: a string (\"yarn\")",
               "text_config.rope_parameters.rope_type=\"yarn\"");
    EXPECT_ERR(BASE_NESTED, QC_ERR_FORMAT, "m/config.json: text_config.linear_num_key_heads: conv dim",
               "text_config.linear_num_key_heads=1000000", "text_config.linear_num_value_heads=1000000",
               "text_config.linear_key_head_dim=100000");
}
END_TEST

/* ==== Model family (model_type / architectures) ==== */

START_TEST(test_family_accepted) {
    qc_config c;
    qc_err e;
    /* the real nested layout, with text_config.model_type and HF's null text architectures */
    const char *nested[] = {"text_config.model_type=\"qwen3_5_text\"",
                            "text_config.architectures=null", NULL};
    ck_assert_msg(parse_edit(BASE_NESTED, nested, &c, &e) == QC_OK, "%s", e.msg);
    ck_assert_int_eq(c.nested, 1);
    /* a nested config with neither field */
    const char *bare[] = {"model_type", "architectures", NULL};
    ck_assert_msg(parse_edit(BASE_NESTED, bare, &c, &e) == QC_OK, "%s", e.msg);
    /* flat: qwen3_5_text / Qwen3_5ForCausalLM, and neither field (flat_legacy has none) */
    char *flat = flat_legacy();
    ck_assert_msg(qc_config_parse(flat, strlen(flat), "m/config.json", &c, &e) == QC_OK, "%s",
                  e.msg);
    const char *f35[] = {"model_type=\"qwen3_5_text\"", "architectures=[\"Qwen3_5ForCausalLM\"]",
                         NULL};
    ck_assert_msg(parse_edit(flat, f35, &c, &e) == QC_OK, "%s", e.msg);
    ck_assert_int_eq(c.nested, 0);
    /* the legacy Qwen3-Next family, dense: num_experts 0, every layer in mlp_only_layers, or a
     * decoder_sparse_step beyond the last layer */
    const char *next0[] = {"model_type=\"qwen3_next\"", "architectures=[\"Qwen3NextForCausalLM\"]",
                           "num_experts=0", NULL};
    ck_assert_msg(parse_edit(flat, next0, &c, &e) == QC_OK, "%s", e.msg);
    const char *next_mlp[] = {"model_type=\"qwen3_next\"", "num_experts=8",
                              "mlp_only_layers=[0,1,2,3]", NULL};
    ck_assert_msg(parse_edit(flat, next_mlp, &c, &e) == QC_OK, "%s", e.msg);
    const char *next_step[] = {"model_type=\"qwen3_next\"", "num_experts=8",
                               "decoder_sparse_step=5", NULL};
    ck_assert_msg(parse_edit(flat, next_step, &c, &e) == QC_OK, "%s", e.msg);
    /* a dense Qwen3.5 config's own fields */
    const char *dense[] = {"model_type=\"qwen3_5_text\"", "mlp_only_layers=[]", NULL};
    ck_assert_msg(parse_edit(flat, dense, &c, &e) == QC_OK, "%s", e.msg);
    free(flat);
    /* what qc_config_to_json writes reads back */
    char *js = NULL;
    ck_assert_int_eq(qc_config_preset("0.8b", &c, &e), QC_OK);
    ck_assert_int_eq(qc_config_to_json(&c, &js, &e), QC_OK);
    ck_assert_msg(qc_config_parse(js, strlen(js), "syn", &c, &e) == QC_OK, "%s", e.msg);
    free(js);
}
END_TEST

START_TEST(test_family_rejected) {
    /* another family, by model_type or by architecture: the field, the value, the accepted */
    EXPECT_ERR(BASE_NESTED, QC_ERR_UNSUPPORTED,
               "m/config.json: model_type 'llama' is not a Qwen3.5 text model (accepted: "
               "qwen3_5_text, qwen3_5_moe_text, qwen3_next, or qwen3_5 / qwen3_5_moe with a "
               "text_config)",
               "model_type=\"llama\"");
    EXPECT_ERR(BASE_NESTED, QC_ERR_UNSUPPORTED,
               "m/config.json: architectures[0] 'LlamaForCausalLM' is not a Qwen3.5 text model "
               "(accepted: Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration, "
               "Qwen3NextForCausalLM, Qwen3_5MoeForCausalLM, Qwen3_5MoeForConditionalGeneration)",
               "architectures=[\"LlamaForCausalLM\"]");
    EXPECT_ERR(BASE_NESTED, QC_ERR_UNSUPPORTED,
               "m/config.json: architectures[1] 'MistralForCausalLM' is not a Qwen3.5",
               "architectures=[\"Qwen3_5ForConditionalGeneration\",\"MistralForCausalLM\"]");
    EXPECT_ERR(BASE_NESTED, QC_ERR_UNSUPPORTED,
               "m/config.json: text_config.model_type 'llama' is not a Qwen3.5 text model "
               "(accepted: qwen3_5_text)",
               "text_config.model_type=\"llama\"");
    EXPECT_ERR(BASE_NESTED, QC_ERR_UNSUPPORTED,
               "m/config.json: text_config.architectures[0] 'LlamaForCausalLM'",
               "text_config.architectures=[\"LlamaForCausalLM\"]");
    /* a Llama config checked before its (absent) DeltaNet fields */
    EXPECT_ERR(BASE_NESTED, QC_ERR_UNSUPPORTED, "model_type 'llama'", "model_type=\"llama\"",
               "text_config.linear_num_key_heads");
    /* related Qwen types that are not the Qwen3.5 text model */
    EXPECT_ERR(BASE_NESTED, QC_ERR_UNSUPPORTED, "model_type 'qwen3' is not a Qwen3.5",
               "model_type=\"qwen3\"");
    EXPECT_ERR(BASE_NESTED, QC_ERR_UNSUPPORTED, "model_type 'qwen2_vl' is not a Qwen3.5",
               "model_type=\"qwen2_vl\"");
    /* the wrapper type without a text_config, a flat type with one */
    char *flat = flat_legacy();
    EXPECT_ERR(flat, QC_ERR_UNSUPPORTED,
               "m/config.json: model_type 'qwen3_5' is the multimodal wrapper and needs a "
               "text_config object",
               "model_type=\"qwen3_5\"");
    EXPECT_ERR(BASE_NESTED, QC_ERR_UNSUPPORTED,
               "m/config.json: model_type 'qwen3_5_text' is a flat text config but text_config "
               "is present",
               "model_type=\"qwen3_5_text\"");
    /* MoE (accepted in tests/test_moe_config.c): a dense config relabelled MoE lacks the MoE
     * fields; a dense wrapper with a MoE text config or architecture is a mix of families */
    EXPECT_ERR(BASE_NESTED, QC_ERR_MISSING,
               "m/config.json: text_config.num_experts: missing (required by model_type "
               "qwen3_5_moe)",
               "model_type=\"qwen3_5_moe\"", "architectures");
    EXPECT_ERR(BASE_NESTED, QC_ERR_UNSUPPORTED,
               "m/config.json: architectures[0] 'Qwen3_5ForConditionalGeneration' is a dense "
               "architecture but model_type 'qwen3_5_moe' is mixture-of-experts",
               "model_type=\"qwen3_5_moe\"");
    EXPECT_ERR(BASE_NESTED, QC_ERR_UNSUPPORTED,
               "m/config.json: text_config.model_type 'qwen3_5_moe_text' does not match "
               "model_type 'qwen3_5'",
               "text_config.model_type=\"qwen3_5_moe_text\"");
    EXPECT_ERR(BASE_NESTED, QC_ERR_UNSUPPORTED,
               "m/config.json: architectures[0] 'Qwen3_5MoeForConditionalGeneration' is a "
               "Qwen3.5 mixture-of-experts architecture but model_type 'qwen3_5' is dense",
               "architectures=[\"Qwen3_5MoeForConditionalGeneration\"]");
    EXPECT_ERR(flat, QC_ERR_MISSING,
               "m/config.json: num_experts: missing (required by model_type qwen3_5_moe_text)",
               "model_type=\"qwen3_5_moe_text\"");
    /* MoE layers by the fields: a real Qwen3-Next config (512 experts), num_experts absent
     * (HF's default 512), or a sparse layer left by mlp_only_layers / decoder_sparse_step */
    EXPECT_ERR(flat, QC_ERR_UNSUPPORTED,
               "m/config.json: num_experts: 512: mixture-of-experts layers are not supported yet "
               "(dense MLP only; layer 0 is MoE)",
               "model_type=\"qwen3_next\"", "num_experts=512");
    EXPECT_ERR(flat, QC_ERR_UNSUPPORTED,
               "m/config.json: num_experts: absent, so a qwen3_next config has 512 experts",
               "model_type=\"qwen3_next\"");
    EXPECT_ERR(flat, QC_ERR_UNSUPPORTED, "num_experts: 8: mixture-of-experts layers are not "
               "supported yet (dense MLP only; layer 3 is MoE)",
               "model_type=\"qwen3_next\"", "num_experts=8", "mlp_only_layers=[0,1,2]");
    EXPECT_ERR(flat, QC_ERR_UNSUPPORTED, "layer 1 is MoE", "model_type=\"qwen3_next\"",
               "num_experts=8", "decoder_sparse_step=2");
    EXPECT_ERR(BASE_NESTED, QC_ERR_UNSUPPORTED,
               "m/config.json: text_config.num_experts: 4: mixture-of-experts", 
               "text_config.num_experts=4");
    EXPECT_ERR(flat, QC_ERR_FORMAT, "m/config.json: num_experts: expected a non-negative integer",
               "num_experts=-1");
    EXPECT_ERR(flat, QC_ERR_FORMAT, "m/config.json: mlp_only_layers: expected an array",
               "num_experts=2", "mlp_only_layers=3");
    /* wrong JSON types */
    EXPECT_ERR(BASE_NESTED, QC_ERR_FORMAT, "m/config.json: model_type: expected a string, got 7",
               "model_type=7");
    EXPECT_ERR(BASE_NESTED, QC_ERR_FORMAT,
               "m/config.json: architectures: expected an array of strings, got a string",
               "architectures=\"Qwen3_5ForCausalLM\"");
    EXPECT_ERR(BASE_NESTED, QC_ERR_FORMAT, "m/config.json: architectures[0]: expected a string",
               "architectures=[1]");
    /* a value with control characters is shown cleaned */
    EXPECT_ERR(BASE_NESTED, QC_ERR_UNSUPPORTED, "model_type 'ab?c' is not", 
               "model_type=\"ab\\u0001c\"");
    free(flat);
}
END_TEST

/* A FIFO (or any non-regular file) as config.json is refused at once, never opened for a
 * blocking read; alarm() turns a hang into a failure. */
START_TEST(test_load_not_regular) {
    char dir[] = "/tmp/qc_test_config_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/config.json", dir);
    ck_assert_int_eq(mkfifo(path, 0600), 0);
    qc_config c;
    qc_err e;
    alarm(10);
    ck_assert_int_eq(qc_config_load(dir, &c, &e), QC_ERR_IO);
    alarm(0);
    char want[300];
    snprintf(want, sizeof want, "%s: not a regular file (a FIFO)", path);
    ck_assert_str_eq(e.msg, want);
    unlink(path);
    ck_assert_int_eq(mkdir(path, 0700), 0);
    ck_assert_int_eq(qc_config_load(dir, &c, &e), QC_ERR_IO);
    snprintf(want, sizeof want, "%s: not a regular file (a directory)", path);
    ck_assert_str_eq(e.msg, want);
    rmdir(path);
    rmdir(dir);
}
END_TEST

START_TEST(test_load_missing_file) {
    qc_config c;
    qc_err e;
    ck_assert_int_eq(qc_config_load("/nonexistent-qc-dir", &c, &e), QC_ERR_IO);
    ck_assert_ptr_nonnull(strstr(e.msg, "/nonexistent-qc-dir/config.json"));
}
END_TEST

int main(void) {
    Suite *s = suite_create("config");
    TCase *ok = tcase_create("accepted");
    tcase_add_test(ok, test_nested_rope_parameters);
    tcase_add_test(ok, test_not_nul_terminated);
    tcase_add_test(ok, test_flat_legacy_rope);
    tcase_add_test(ok, test_rope_defaults_and_top_level);
    tcase_add_test(ok, test_layer_types_interval);
    tcase_add_test(ok, test_tie_rules);
    tcase_add_test(ok, test_defaults_head_dim_eps);
    tcase_add_test(ok, test_presets);
    tcase_add_test(ok, test_presets_27b_2_4t);
    suite_add_tcase(s, ok);
    TCase *bad = tcase_create("malformed");
    tcase_add_test(bad, test_bad_json);
    tcase_add_test(bad, test_bad_fields);
    tcase_add_test(bad, test_bad_consistency);
    tcase_add_test(bad, test_gates);
    tcase_add_test(bad, test_load_missing_file);
    tcase_add_test(bad, test_load_not_regular);
    suite_add_tcase(s, bad);
    TCase *fam = tcase_create("family");
    tcase_add_test(fam, test_family_accepted);
    tcase_add_test(fam, test_family_rejected);
    suite_add_tcase(s, fam);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
