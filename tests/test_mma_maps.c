/* The attention kernels' fragment maps (src/backend/cuda/arch/fragments.h), checked on
 * the host, so CI catches a wrong lane map without a GPU: ldmatrix.x4 (plain and .trans)
 * and mma.sync.m16n8k16 are emulated as the PTX ISA defines them (the layouts are
 * restated here from the ISA, independently of fragments.h), and the two tile products
 * of attention.cu are run through the emulated fragments with the kernels' own maps:
 *   scores:     S (16 x 64) = A (16 x hs) B^T, B stored as 64 rows of hs (K in Q K^T);
 *   accumulate: O (16 x hs) += P (16 x 64, held as accumulator tiles) X, X stored as 64
 *               rows of hs (V in P V), P turned into A fragments by a_from_acc.
 * Against naive products; integer values keep every sum exact. Tiles are padded by 8
 * elements a row as in the kernels. */
#include <stdint.h>
#include <string.h>

#include "backend/cuda/arch/fragments.h"
#include "check.h"

enum { HS = 64, LD = HS + 8, KEYS = 64 };

/* ldmatrix.x4: lane 8m + r gives (row[8m + r], col[8m + r]), the start of row r of 8x8
 * matrix m in `tile` (stride ld); lane l receives, in register m, the pair h = 0, 1 at
 * (l/4, 2(l%4) + h) of matrix m, or (2(l%4) + h, l/4) with trans. */
static void ldmatrix_x4(float out[32][4][2], const float *tile, int ld, const int row[32], const int col[32], int trans) {
    for (int l = 0; l < 32; l++)
        for (int m = 0; m < 4; m++)
            for (int h = 0; h < 2; h++) {
                int r = trans ? 2 * (l % 4) + h : l / 4, c = trans ? l / 4 : 2 * (l % 4) + h, src = 8 * m + r;
                out[l][m][h] = tile[row[src] * ld + col[src] + c];
            }
}

/* mma.m16n8k16: the A (16x16) and B (16x8) the fragments hold, multiplied, and added to
 * each lane's accumulator elements. The layouts as the ISA states them. */
static void mma(float acc[32][4], float a[32][4][2], float b[32][2][2]) {
    float A[16][16], B[16][8];
    for (int l = 0; l < 32; l++) {
        int g = l / 4, t = l % 4;
        for (int x = 0; x < 4; x++)
            for (int h = 0; h < 2; h++) A[g + 8 * (x % 2)][2 * t + h + 8 * (x / 2)] = a[l][x][h];
        for (int x = 0; x < 2; x++)
            for (int h = 0; h < 2; h++) B[2 * t + h + 8 * x][g] = b[l][x][h];
    }
    for (int l = 0; l < 32; l++)
        for (int e = 0; e < 4; e++) {
            int i = l / 4 + 8 * (e / 2), j = 2 * (l % 4) + e % 2;
            for (int k = 0; k < 16; k++) acc[l][e] += A[i][k] * B[k][j];
        }
}

/* Lane addresses of a read at tile offset (r0, c0). */
static void lane_rows(int row[32], int col[32], int (*rf)(int), int (*cf)(int), int r0, int c0) {
    for (int l = 0; l < 32; l++) row[l] = r0 + rf(l), col[l] = c0 + cf(l);
}

/* Two B fragments (n 0-7, n 8-15) out of one x4 read. */
static void split_b2(float f0[32][2][2], float f1[32][2][2], float r[32][4][2]) {
    for (int l = 0; l < 32; l++)
        for (int h = 0; h < 2; h++) {
            f0[l][0][h] = r[l][0][h], f0[l][1][h] = r[l][1][h];
            f1[l][0][h] = r[l][2][h], f1[l][1][h] = r[l][3][h];
        }
}

/* acc0, acc1 += fa times the two B tiles of one x4 read at tile offset (r0, c0), as the
 * kernels' inner loops do. */
static void mma_b2(float acc0[32][4], float acc1[32][4], float fa[32][4][2], const float *tile, int (*rf)(int), int (*cf)(int),
                   int r0, int c0, int trans) {
    int row[32], col[32];
    float r[32][4][2], f0[32][2][2], f1[32][2][2];
    lane_rows(row, col, rf, cf, r0, c0);
    ldmatrix_x4(r, tile, LD, row, col, trans);
    split_b2(f0, f1, r);
    mma(acc0, fa, f0);
    mma(acc1, fa, f1);
}

/* Element (i, j) of accumulator tiles acc[n tiles][lane][4] of a 16-row product. */
static float acc_at(float acc[][32][4], int i, int j) {
    int nt = j / 8, c = j % 8, l = (i % 8) * 4 + c / 2, e = (i / 8) * 2 + c % 2;
    return acc[nt][l][e];
}

static float val(uint32_t *x) { /* small non-zero integers */
    *x = *x * 1103515245u + 12345u;
    int v = (int)(*x >> 16) % 7 - 3;
    return (float)(v ? v : 4);
}

static void test_scores(void) {
    static float a[16 * LD], b[KEYS * LD], acc[8][32][4];
    uint32_t s = 1;
    for (int i = 0; i < 16 * LD; i++) a[i] = val(&s);
    for (int i = 0; i < KEYS * LD; i++) b[i] = val(&s);
    memset(acc, 0, sizeof acc);
    for (int kk = 0; kk < HS / 16; kk++) {
        int row[32], col[32];
        float fa[32][4][2];
        lane_rows(row, col, ldsm_a_row, ldsm_a_col, 0, kk * 16);
        ldmatrix_x4(fa, a, LD, row, col, 0);
        for (int np = 0; np < 4; np++)
            mma_b2(acc[2 * np], acc[2 * np + 1], fa, b, ldsm_nrows_row, ldsm_nrows_col, np * 16, kk * 16, 0);
    }
    int bad = 0;
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < KEYS; j++) {
            float want = 0.0f;
            for (int k = 0; k < HS; k++) want += a[i * LD + k] * b[j * LD + k];
            bad += acc_at(acc, i, j) != want;
        }
    CHECK(bad == 0);
    printf("scores (A B^T through ldsm_a, ldsm_b2_nrows): %d of %d elements wrong\n", bad, 16 * KEYS);
}

static void test_accumulate(void) {
    static float p[16][KEYS], x[KEYS * LD], pacc[8][32][4], acc[HS / 8][32][4];
    uint32_t s = 2;
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < KEYS; j++) p[i][j] = val(&s);
    for (int i = 0; i < KEYS * LD; i++) x[i] = val(&s);
    for (int nt = 0; nt < 8; nt++) /* P as the accumulator tiles a scores product leaves */
        for (int l = 0; l < 32; l++)
            for (int e = 0; e < 4; e++) pacc[nt][l][e] = p[l / 4 + 8 * (e / 2)][nt * 8 + 2 * (l % 4) + e % 2];
    memset(acc, 0, sizeof acc);
    for (int kk = 0; kk < KEYS / 16; kk++) {
        float fa[32][4][2];
        for (int l = 0; l < 32; l++) /* a_from_acc */
            for (int q = 0; q < 4; q++)
                for (int h = 0; h < 2; h++) fa[l][q][h] = pacc[2 * kk + a_from_acc_tile(q)][l][a_from_acc_elem(q, h)];
        for (int dp = 0; dp < HS / 16; dp++)
            mma_b2(acc[2 * dp], acc[2 * dp + 1], fa, x, ldsm_krows_row, ldsm_krows_col, kk * 16, dp * 16, 1);
    }
    int bad = 0;
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < HS; j++) {
            float want = 0.0f;
            for (int k = 0; k < KEYS; k++) want += p[i][k] * x[k * LD + j];
            bad += acc_at(acc, i, j) != want;
        }
    CHECK(bad == 0);
    printf("accumulate (P X through a_from_acc, ldsm_b2_krows): %d of %d elements wrong\n", bad, 16 * HS);
}

int main(void) {
    test_scores();
    test_accumulate();
    CHECK_DONE();
}
