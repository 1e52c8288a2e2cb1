/* Why random windows copy slower than one contiguous block: the A/B behind docs/data.md ("Where the
 * gather's bandwidth goes") and stride/data/copy_kernel.c. Hardware counters are not readable in this
 * project's KVM guests (perf stat: <not supported> for cycles, cache and TLB events), so each suspect is
 * varied on its own, side by side: 4 MiB copied as one block or as random blocks (rows of 128 bytes, as
 * the benchmark's store), from a file mapping (the store), anonymous 4 KiB pages or 2 MiB huge pages,
 * into a destination in cache or one of 16 outside it, with memcpy, streaming stores, hints of the page
 * heads of the block k ahead (the kernel's), whole next blocks prefetched, 4 blocks interleaved, or a
 * block's 4 pages copied as interleaved streams with the next block's lines hinted (the kernel's `lines`, as 1, 2 or
 * 3 blocks at once: 4, 8 or 12 page streams), or its lines in order with the next block's same line hinted (`lines`
 * = 1; `_dN`: the line N blocks on hinted), over random blocks and over consecutive ones (`seq_`: the same code,
 * so the gap is what randomness costs); the batch's blocks as one stream whose line D bytes on is hinted as each line
 * copies (`streamD`), and `rep movsb` (`rep`: a whole 4 MiB block, or each block with its next block's lines of
 * every 1 KiB hinted first). Variants run in a shuffled order every round; medians of GB/s per CPU-second of the
 * thread. SEED (optional) draws other random blocks.
 *
 *   cc -O3 -march=native -o /tmp/gather_ab benchmarks/data_gather_ab.c
 *   dd if=/dev/urandom of=/tmp/store.bin bs=4M count=64 && /tmp/gather_ab /tmp/store.bin 256 60 [SEED]
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define ROW 128
#define NB (4 << 20)
enum { FILEMAP, ANON, HUGE };
enum { CONTIG, MEMCPY, NT, HEADS, WHOLE_T0, WHOLE_T1, INTERLEAVE4, LINES4, LINES8, LINES12, LINES1, STREAMD, REP };
/* seq: the blocks one after another; d: LINES1's distance in blocks, STREAMD's in bytes, REP's hinted chunk (0: none) */
typedef struct { const char *name; int src, mode, blk, k, fresh, seq, d; } variant;
static const variant V[] = {
    {"contig_file", FILEMAP, CONTIG, NB, 0, 0},        {"contig_anon4k", ANON, CONTIG, NB, 0, 0},
    {"contig_huge", HUGE, CONTIG, NB, 0, 0},           {"contig_file_fresh_dst", FILEMAP, CONTIG, NB, 0, 1},
    {"rand16k_file", FILEMAP, MEMCPY, 16384, 0, 0},    {"rand16k_anon4k", ANON, MEMCPY, 16384, 0, 0},
    {"rand16k_huge", HUGE, MEMCPY, 16384, 0, 0},       {"rand16k_file_fresh_dst", FILEMAP, MEMCPY, 16384, 0, 1},
    {"rand16k_file_nt", FILEMAP, NT, 16384, 0, 0},     {"rand16k_file_nt_fresh", FILEMAP, NT, 16384, 0, 1},
    {"rand4k_file", FILEMAP, MEMCPY, 4096, 0, 0},      {"rand64k_file", FILEMAP, MEMCPY, 65536, 0, 0},
    {"rand256k_file", FILEMAP, MEMCPY, 262144, 0, 0},  {"heads_k2_file", FILEMAP, HEADS, 16384, 2, 0},
    {"heads_k4_file", FILEMAP, HEADS, 16384, 4, 0},    {"heads_k8_file", FILEMAP, HEADS, 16384, 8, 0},
    {"heads_k4_huge", HUGE, HEADS, 16384, 4, 0},       {"whole_next_T0_file", FILEMAP, WHOLE_T0, 16384, 1, 0},
    {"whole_next_T1_file", FILEMAP, WHOLE_T1, 16384, 1, 0}, {"interleave4_file", FILEMAP, INTERLEAVE4, 16384, 4, 0},
    {"lines4_k4_file", FILEMAP, LINES4, 16384, 4, 0},      {"lines4_k4_huge", HUGE, LINES4, 16384, 4, 0},
    {"lines4_k4_file_fresh_dst", FILEMAP, LINES4, 16384, 4, 1}, {"lines8_k4_file", FILEMAP, LINES8, 16384, 4, 0},
    {"lines12_k4_file", FILEMAP, LINES12, 16384, 4, 0},
    /* the kernel's `lines` = 1: a window's lines in order, each line of the next window hinted as the same line of
     * this one copies; and the same copies over consecutive blocks (`seq_`): what randomness itself costs */
    {"lines1_k2_file", FILEMAP, LINES1, 16384, 2, 0, 0, 1},  {"seq_lines1_k2_file", FILEMAP, LINES1, 16384, 2, 0, 1, 1},
    {"seq16k_file", FILEMAP, MEMCPY, 16384, 0, 0, 1},
    /* how far ahead the lines are hinted: 1, 2 or 4 blocks, or D bytes on in the batch's stream (session 36) */
    {"lines1_k0_d1_file", FILEMAP, LINES1, 16384, 0, 0, 0, 1}, {"lines1_k0_d2_file", FILEMAP, LINES1, 16384, 0, 0, 0, 2},
    {"lines1_k0_d4_file", FILEMAP, LINES1, 16384, 0, 0, 0, 4},  {"streamD8k_file", FILEMAP, STREAMD, 16384, 0, 0, 0, 8192},
    {"streamD16k_file", FILEMAP, STREAMD, 16384, 0, 0, 0, 16384}, {"streamD32k_file", FILEMAP, STREAMD, 16384, 0, 0, 0, 32768},
    /* rep movsb: one 4 MiB block (the host's fastest contiguous copy?), and random blocks with hints */
    {"contig_rep_file", FILEMAP, REP, NB, 0, 0},  {"rep16k_file", FILEMAP, REP, 16384, 0, 0},
    {"rep16k_hint1k_file", FILEMAP, REP, 16384, 0, 0, 0, 1024},
};
#define NV ((int)(sizeof V / sizeof *V))

static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}
static uint64_t rs = 88172645463325252ull;
static uint64_t rnd(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return rs; }
static int cmpd(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }

static void copy_nt(char *d, const char *s, size_t n) {
    for (size_t i = 0; i < n; i += 64) _mm512_stream_si512((void *)(d + i), _mm512_loadu_si512((const void *)(s + i)));
}
static void heads(const char *p, int blk) { /* the kernel's hint: first two lines of every 4 KiB page */
    for (const char *q = p; q < p + blk; q = (const char *)(((uintptr_t)q + 4096) & ~(uintptr_t)4095)) {
        _mm_prefetch(q, _MM_HINT_T1);
        _mm_prefetch(q + 64, _MM_HINT_T1);
    }
}

static void run(const variant *v, char *dst, const char *src, const int64_t *st) {
    int nb = NB / v->blk;
    if (v->mode == CONTIG) { memcpy(dst, src + st[0] * ROW, NB); return; }
    if (v->mode == INTERLEAVE4) { /* 4 windows copied 1 KiB at a time in turn: 4 streams for the prefetchers */
        for (int b = 0; b < nb; b += 4)
            for (int i = 0; i < v->blk; i += 1024)
                for (int j = 0; j < 4; j++) memcpy(dst + (size_t)(b + j) * v->blk + i, src + st[b + j] * ROW + i, 1024);
        return;
    }
    if (v->mode == LINES4 || v->mode == LINES8 || v->mode == LINES12) { /* the kernel's `lines`: a window's 4
        pages as interleaved streams, every line of the next window(s) hinted into L2; LINES8: two windows'
        8 pages at once, LINES12: three windows' 12 (the kernel's STREAMS) */
        int w = v->mode == LINES12 ? 3 : v->mode == LINES8 ? 2 : 1;
        for (int j = 0; j < v->k; j++) heads(src + st[j] * ROW, v->blk);
        for (int b = 0; b < nb; b += w) {
            for (int j = 0; j < w; j++) if (b + j + v->k < nb) heads(src + st[b + j + v->k] * ROW, v->blk);
            for (int i = 0; i < 4096; i += 64)
                for (int j = 0; j < w && b + j < nb; j++) {
                    const char *s = src + st[b + j] * ROW, *n = b + j + w < nb ? src + st[b + j + w] * ROW : 0;
                    char *d = dst + (size_t)(b + j) * v->blk;
                    for (int p = 0; p < v->blk; p += 4096) {
                        if (n) _mm_prefetch(n + p + i, _MM_HINT_T1);
                        _mm512_storeu_si512((void *)(d + p + i), _mm512_loadu_si512((const void *)(s + p + i)));
                    }
                }
        }
        return;
    }
    if (v->mode == STREAMD) { /* the blocks as one stream; the line D bytes on in it hinted as each line copies. The
        block and D are run-time values, so each line's hint costs a division: the same hints with both as
        compile-time constants copied at 0.57-0.58 of contig_file against 0.74-0.77 (session 36, AMD EPYC family 26):
        on that host how fast the hints issue matters, not only where they point */
        const int64_t D = v->d, L = v->blk, total = (int64_t)nb * L;
        for (int64_t q = 0; q < D && q < total; q += 64) _mm_prefetch(src + st[q / L] * ROW + q % L, _MM_HINT_T1);
        for (int b = 0; b < nb; b++) {
            const char *s = src + st[b] * ROW;
            char *d = dst + (size_t)b * L;
            for (int64_t i = 0; i < L; i += 64) {
                const int64_t q = (int64_t)b * L + i + D;
                if (q < total) _mm_prefetch(src + st[q / L] * ROW + q % L, _MM_HINT_T1);
                _mm512_storeu_si512((void *)(d + i), _mm512_loadu_si512((const void *)(s + i)));
            }
        }
        return;
    }
    if (v->mode == REP) { /* rep movsb, a block at a time (or d bytes at a time, the next block's lines of them hinted) */
        const int c = v->d > 0 ? v->d : v->blk;
        for (int b = 0; b < nb; b++) {
            const char *s = src + st[b] * ROW, *n = v->d > 0 && b + 1 < nb ? src + st[b + 1] * ROW : 0;
            for (int i = 0; i < v->blk; i += c) {
                if (n) for (int l = 0; l < c; l += 64) _mm_prefetch(n + i + l, _MM_HINT_T1);
                void *dd = dst + (size_t)b * v->blk + i;
                const void *ss = s + i;
                size_t cnt = (size_t)c;
                __asm__ volatile("rep movsb" : "+D"(dd), "+S"(ss), "+c"(cnt) : : "memory");
            }
        }
        return;
    }
    if (v->mode == LINES1) { /* the line d blocks on hinted as each line copies (and page heads k blocks on) */
        const int dn = v->d > 0 ? v->d : 1;
        for (int j = 0; j < v->k; j++) heads(src + st[j] * ROW, v->blk);
        for (int j = 1; j < dn && j < nb; j++)
            for (int i = 0; i < v->blk; i += 64) _mm_prefetch(src + st[j] * ROW + i, _MM_HINT_T1);
        for (int b = 0; b < nb; b++) {
            const char *s = src + st[b] * ROW, *n = b + dn < nb ? src + st[b + dn] * ROW : 0;
            char *d = dst + (size_t)b * v->blk;
            if (v->k && b + v->k < nb) heads(src + st[b + v->k] * ROW, v->blk);
            for (int i = 0; i < v->blk; i += 64) {
                if (n) _mm_prefetch(n + i, _MM_HINT_T1);
                _mm512_storeu_si512((void *)(d + i), _mm512_loadu_si512((const void *)(s + i)));
            }
        }
        return;
    }
    if (v->mode == HEADS) for (int j = 0; j < v->k; j++) heads(src + st[j] * ROW, v->blk);
    for (int b = 0; b < nb; b++) {
        const char *s = src + st[b] * ROW;
        char *d = dst + (size_t)b * v->blk;
        if (v->mode == HEADS && b + v->k < nb) heads(src + st[b + v->k] * ROW, v->blk);
        if (v->mode == WHOLE_T0 || v->mode == WHOLE_T1) { /* every line of the next window, spread over this copy */
            const char *p = b + 1 < nb ? src + st[b + 1] * ROW : 0;
            for (int i = 0; i < v->blk; i += 1024) {
                for (int l = 0; p && l < 1024; l += 64) {
                    if (v->mode == WHOLE_T0) _mm_prefetch(p + i + l, _MM_HINT_T0); else _mm_prefetch(p + i + l, _MM_HINT_T1);
                }
                memcpy(d + i, s + i, 1024);
            }
            continue;
        }
        if (v->mode == NT) copy_nt(d, s, v->blk); else memcpy(d, s, v->blk);
    }
    if (v->mode == NT) _mm_sfence();
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s STORE_FILE [MiB=128] [rounds=60] [SEED]\n", argv[0]); return 2; }
    size_t sn = (size_t)(argc > 2 ? atoi(argv[2]) : 128) << 20;
    int reps = argc > 3 ? atoi(argv[3]) : 60;
    if (argc > 4) rs ^= (uint64_t)atoll(argv[4]) * 0x9E3779B97F4A7C15ull;
    char *srcs[3];
    int fd = open(argv[1], O_RDONLY);
    srcs[FILEMAP] = mmap(0, sn, PROT_READ, MAP_PRIVATE, fd, 0);
    if (fd < 0 || srcs[FILEMAP] == MAP_FAILED) { perror(argv[1]); return 1; }
    volatile char sink = 0;
    for (size_t i = 0; i < sn; i += 4096) sink += srcs[FILEMAP][i];
    srcs[ANON] = aligned_alloc(1 << 21, sn);
    madvise(srcs[ANON], sn, MADV_NOHUGEPAGE);
    srcs[HUGE] = aligned_alloc(1 << 21, sn);
    madvise(srcs[HUGE], sn, MADV_HUGEPAGE);
    memcpy(srcs[ANON], srcs[FILEMAP], sn);
    memcpy(srcs[HUGE], srcs[FILEMAP], sn);
    char *dst = aligned_alloc(4096, NB), *fresh = aligned_alloc(4096, (size_t)NB * 16);
    memset(dst, 0, NB);
    memset(fresh, 0, (size_t)NB * 16);
    double *gbs = calloc((size_t)NV * reps, sizeof *gbs);
    int order[NV];
    for (int i = 0; i < NV; i++) order[i] = i;
    int64_t st[NB / 4096];
    for (int r = 0; r < reps; r++) {
        for (int i = NV - 1; i > 0; i--) { int j = rnd() % (i + 1), t = order[i]; order[i] = order[j]; order[j] = t; }
        for (int oi = 0; oi < NV; oi++) {
            const variant *v = &V[order[oi]];
            for (int b = 0; b < NB / v->blk; b++) st[b] = rnd() % (sn / ROW - v->blk / ROW);
            if (v->seq) { /* one random start, the blocks after it */
                st[0] = rnd() % (sn / ROW - NB / ROW);
                for (int b = 1; b < NB / v->blk; b++) st[b] = st[b - 1] + v->blk / ROW;
            }
            char *d = v->fresh ? fresh + (size_t)NB * (r % 16) : dst;
            double t0 = cpu_now();
            run(v, d, srcs[v->src], st);
            gbs[order[oi] * reps + r] = NB / (cpu_now() - t0) / 1e9;
        }
    }
    double base = 0;
    printf("%-24s %8s %8s\n", "variant", "GB/s", "of contig_file");
    for (int i = 0; i < NV; i++) {
        qsort(gbs + (size_t)i * reps, reps, sizeof *gbs, cmpd);
        double m = gbs[(size_t)i * reps + reps / 2];
        if (i == 0) base = m;
        printf("%-24s %8.2f %8.2f\n", V[i].name, m, m / base);
    }
    return sink == 42;
}
