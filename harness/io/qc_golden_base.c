/* qc_golden_base.c — the bottom of the golden files (qc_golden_internal.h): what the case
 * reader (qc_golden_case.c), its MoE datasets (qc_golden_moe.c), the writer
 * (qc_golden_write.c) and the ACTUAL reader share without calling each other — a state
 * snapshot's per-layer pointer arrays and their release, the positions a case may use and the
 * saturating size arithmetic. Calls no other golden file (tests/check_cycles.py).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "qc_golden_internal.h"

/* ===================================================================================== */
/* state snapshots: the per-layer arrays                                                 */
/* ===================================================================================== */

/* Allocate the per-layer pointer arrays of gs (all NULL). */
qc_status gio_state_alloc_ptrs(const qc_config *cfg, qc_golden_state *gs) {
    int L = cfg->n_layers;
    gs->k_cache = calloc((size_t)L, sizeof(float *));
    gs->v_cache = calloc((size_t)L, sizeof(float *));
    gs->conv_state = calloc((size_t)L, sizeof(float *));
    gs->recurrent_state = calloc((size_t)L, sizeof(float *));
    if (!gs->k_cache || !gs->v_cache || !gs->conv_state || !gs->recurrent_state)
        return QC_ERR_OOM;
    return QC_OK;
}

void qc_golden_state_free(const qc_config *cfg, qc_golden_state *gs) {
    if (!gs) return;
    for (int l = 0; l < cfg->n_layers; l++) {
        if (gs->k_cache) free(gs->k_cache[l]);
        if (gs->v_cache) free(gs->v_cache[l]);
        if (gs->conv_state) free(gs->conv_state[l]);
        if (gs->recurrent_state) free(gs->recurrent_state[l]);
    }
    free(gs->k_cache);
    free(gs->v_cache);
    free(gs->conv_state);
    free(gs->recurrent_state);
    memset(gs, 0, sizeof *gs);
}

/* ===================================================================================== */
/* positions and sizes                                                                   */
/* ===================================================================================== */

int qc_golden_max_positions(const qc_config *cfg) {
    int m = cfg ? cfg->max_position_embeddings : 0;
    return m > 0 && m < QC_GOLDEN_MAX_POSITIONS ? m : QC_GOLDEN_MAX_POSITIONS;
}

/* What bounds the positions, for messages. */
const char *gio_positions_what(const qc_config *cfg) {
    return cfg->max_position_embeddings > 0 &&
                   cfg->max_position_embeddings < QC_GOLDEN_MAX_POSITIONS
               ? "the config's max_position_embeddings"
               : "the reader's limit";
}

/* a * b + c in 64 bits, saturating */
uint64_t gio_sat_madd(uint64_t a, uint64_t b, uint64_t c) {
    if (a && b > UINT64_MAX / a) return UINT64_MAX;
    uint64_t p = a * b;
    return p > UINT64_MAX - c ? UINT64_MAX : p + c;
}
