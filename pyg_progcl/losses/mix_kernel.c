/* ProGCL's row passes: the hardness b of a block of logits and, for ProGCL-mix's
 * synthesised negatives, one pass over each anchor's row: the selection of the k largest
 * b (radix select on their bit patterns), the mixing of the selected logits and, in
 * backward, the scatter of their gradients. The compiled counterpart of
 * BetaMixture.hardness_ (mixture.py) and MixedSums._mix / .backward (_mixing.py), which
 * document the formulas; _kernels.py compiles and loads this file.
 *
 * Every function handles the rows [r0, r1) of its matrices on `threads` OpenMP threads
 * (compiled with -fopenmp inside torch's process, the runtime is torch's own libgomp, so
 * the threads are torch's; without OpenMP on one, and the caller runs row ranges on
 * parallel threads). Matrices are addressed as x[r * s0 + c * s1] (the columns of a
 * matrix are the rows of its transpose). Each returns 0, or 1 if scratch ran out. */

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define RADIX_BITS 11

/* The AVX2 compactions below, unless PYG_PROGCL_NO_AVX2 is defined (then the scalar ones,
 * as on CPUs without AVX2; the tests build both). */
#if defined(__AVX2__) && !defined(PYG_PROGCL_NO_AVX2)
#define USE_AVX2 1
#else
#define USE_AVX2 0
#endif

/* The compiler flags of this build (_kernels.py passes them as a string), for its status. */
#ifndef PYG_PROGCL_FLAGS
#define PYG_PROGCL_FLAGS ""
#endif

int openmp(void) {
#ifdef _OPENMP
    return 1;
#else
    return 0;
#endif
}

int avx2(void) { return USE_AVX2; }

const char *build_flags(void) { return PYG_PROGCL_FLAGS; }

#if defined(__GLIBC__) && defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
/* glibc's vector expf and logf (libmvec): the loops that call them vectorise */
__attribute__((__simd__("notinbranch"))) float expf(float);
__attribute__((__simd__("notinbranch"))) float logf(float);
#endif

/* ProGCL's hardness b = s p(TN | s) of the rows [r0, r1) of shifted logits (row stride
 * s0, contiguous rows): s = 1 + (tau/2) logit clamped to [eps, 1 - eps], the mixture's
 * log odds D = a log s + b log(1 - s) + c of a false negative, p(TN | s) = 1 / (1 + e^D)
 * floored at min_p (mixture.py: BetaMixture.hardness_). */
#define DEFINE_HARDNESS(NAME, T, LOG, EXP)                                                \
    int NAME(const T *logits, int64_t s0, int64_t n, double half_tau, double eps,        \
             double a, double b, double c, double min_p, int64_t r0, int64_t r1,         \
             T *out, int threads) {                                                      \
        const T lo = (T)eps, hi = (T)1 - (T)eps, ta = (T)a, tb = (T)b, tc = (T)c;        \
        _Pragma("omp parallel for schedule(static) num_threads(threads)")                \
        for (int64_t r = r0; r < r1; r++) {                                              \
            const T *x = logits + r * s0;                                                \
            T *o = out + r * n;                                                          \
            for (int64_t j = 0; j < n; j++) {                                            \
                T s = (T)1 + (T)half_tau * x[j];                                         \
                s = s < lo ? lo : (s > hi ? hi : s);                                     \
                T p = (T)1 / ((T)1 + EXP(ta * LOG(s) + tb * LOG((T)1 - s) + tc));        \
                o[j] = s * (p < (T)min_p ? (T)min_p : p);                                \
            }                                                                            \
        }                                                                                \
        return 0;                                                                        \
    }

DEFINE_HARDNESS(hardness_f32, float, logf, expf)
DEFINE_HARDNESS(hardness_f64, double, log, exp)

/* Branch-free compactions of a row's keys: at_least writes the columns c of the keys
 * >= kth, ascending, to cols (n + 8 slots); in_range the keys in [a, b] to dst (m + 8
 * slots); both return how many. On AVX2 (USE_AVX2), 8 keys at a time, left-packed by a
 * permutation looked up from their comparison mask. */
#define DEFINE_COMPACT(SUFFIX, KEY)                                                       \
    static int64_t at_least_##SUFFIX(const KEY *key, int64_t n, KEY kth, int32_t *cols,   \
                                     int64_t c) {                                        \
        int64_t j = 0;                                                                   \
        for (; c < n; c++) cols[j] = (int32_t)c, j += key[c] >= kth;                     \
        return j;                                                                        \
    }                                                                                    \
    static int64_t in_range_##SUFFIX(const KEY *src, int64_t m, KEY a, KEY b, KEY *dst,  \
                                     int64_t i) {                                        \
        int64_t j = 0;                                                                   \
        for (; i < m; i++) dst[j] = src[i], j += (src[i] >= a) & (src[i] <= b);          \
        return j;                                                                        \
    }

DEFINE_COMPACT(scalar32, int32_t)
DEFINE_COMPACT(scalar64, int64_t)

#if USE_AVX2
#include <immintrin.h>

static int32_t left_pack[256][8]; /* lanes of mask bits, lowest first */

__attribute__((constructor)) static void init_left_pack(void) {
    for (int mask = 0; mask < 256; mask++)
        for (int lane = 0, j = 0; lane < 8; lane++)
            if (mask >> lane & 1) left_pack[mask][j++] = lane;
}

static inline int64_t pack8(__m256i values, int mask, int32_t *out) {
    __m256i order = _mm256_loadu_si256((const __m256i *)left_pack[mask]);
    _mm256_storeu_si256((__m256i *)out, _mm256_permutevar8x32_epi32(values, order));
    return __builtin_popcount(mask);
}

static int64_t at_least_i32(const int32_t *key, int64_t n, int32_t kth, int32_t *cols) {
    if (kth == INT32_MIN) return at_least_scalar32(key, n, kth, cols, 0);
    const __m256i below = _mm256_set1_epi32(kth - 1), eight = _mm256_set1_epi32(8);
    __m256i c8 = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    int64_t j = 0, c = 0;
    for (; c + 8 <= n; c += 8, c8 = _mm256_add_epi32(c8, eight)) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(key + c));
        int mask = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(v, below)));
        j += pack8(c8, mask, cols + j);
    }
    return j + at_least_scalar32(key, n, kth, cols + j, c);
}

static int64_t in_range_i32(const int32_t *src, int64_t m, int32_t a, int32_t b, int32_t *dst) {
    if (a == INT32_MIN || b == INT32_MAX) return in_range_scalar32(src, m, a, b, dst, 0);
    const __m256i lo = _mm256_set1_epi32(a - 1), hi = _mm256_set1_epi32(b + 1);
    int64_t j = 0, i = 0;
    for (; i + 8 <= m; i += 8) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(src + i));
        __m256i in = _mm256_and_si256(_mm256_cmpgt_epi32(v, lo), _mm256_cmpgt_epi32(hi, v));
        j += pack8(v, _mm256_movemask_ps(_mm256_castsi256_ps(in)), dst + j);
    }
    return j + in_range_scalar32(src, m, a, b, dst + j, i);
}
#else
#define at_least_i32(key, n, kth, cols) at_least_scalar32(key, n, kth, cols, 0)
#define in_range_i32(src, m, a, b, dst) in_range_scalar32(src, m, a, b, dst, 0)
#endif
#define at_least_i64(key, n, kth, cols) at_least_scalar64(key, n, kth, cols, 0)
#define in_range_i64(src, m, a, b, dst) in_range_scalar64(src, m, a, b, dst, 0)

/* The column indices of the k largest of a row of n values, ascending, the ties at the
 * k-th value taken from the lowest columns. The values are +0 or above (b), so they order
 * as their bit patterns do as signed integers (the keys). The k-th key is found by radix
 * select on the keys' offsets from the row's least key, RADIX_BITS at a time from the top
 * of their range, each round on the keys left in the bucket that holds it.
 * hist: 2^RADIX_BITS counts; cand: n + 8 keys and cols: n + 8 columns of scratch. */
#define DEFINE_SELECT(NAME, KEY, UKEY, SUFFIX)                                                    \
    static void NAME(const KEY *key, int64_t n, int64_t k, int32_t *out, int32_t *hist,  \
                     KEY *cand, int32_t *cols) {                                         \
        const KEY *src = key;                                                            \
        int64_t need = k, m = n, equal;                                                  \
        KEY kth;                                                                         \
        for (;;) {                                                                       \
            KEY lo = src[0], hi = src[0];                                                \
            for (int64_t i = 1; i < m; i++) {                                            \
                lo = src[i] < lo ? src[i] : lo;                                          \
                hi = src[i] > hi ? src[i] : hi;                                          \
            }                                                                            \
            UKEY range = (UKEY)hi - (UKEY)lo;                                            \
            if (range == 0) {                                                            \
                kth = lo, equal = m;                                                     \
                break;                                                                   \
            }                                                                            \
            int shift = 0;                                                               \
            while ((range >> shift) >= ((UKEY)1 << RADIX_BITS)) shift++;                 \
            int64_t top = (int64_t)(range >> shift), d = top, above = 0;                 \
            memset(hist, 0, sizeof(int32_t) * (size_t)(top + 1));                        \
            for (int64_t i = 0; i < m; i++) hist[((UKEY)src[i] - (UKEY)lo) >> shift]++;  \
            while (above + hist[d] < need) above += hist[d--];                           \
            need -= above; /* still to take from bucket d */                             \
            if (shift == 0) {                                                            \
                kth = (KEY)((UKEY)lo + (UKEY)d), equal = hist[d];                        \
                break;                                                                   \
            }                                                                            \
            UKEY last = ((UKEY)(d + 1) << shift) - 1; /* bucket d: [lo + first, lo + last] */ \
            KEY first = (KEY)((UKEY)lo + ((UKEY)d << shift));                            \
            m = in_range_##SUFFIX(src, m, first, (KEY)((UKEY)lo + (last < range ? last : range)), cand); \
            src = cand;                                                                  \
        }                                                                                \
        /* need: the ties at kth to take, from the lowest columns; if all, no count */   \
        int64_t j = 0;                                                                   \
        if (need == equal) {                                                             \
            j = at_least_##SUFFIX(key, n, kth, cols);                                    \
        } else {                                                                         \
            for (int64_t c = 0; c < n; c++) {                                            \
                int tie = key[c] == kth, take = (key[c] > kth) | (tie & (need > 0));     \
                cols[j] = (int32_t)c, j += take, need -= tie & take;                     \
            }                                                                            \
        }                                                                                \
        memcpy(out, cols, sizeof(int32_t) * (size_t)k);                                  \
    }

DEFINE_SELECT(select_f32, int32_t, uint32_t, i32)
DEFINE_SELECT(select_f64, int64_t, uint64_t, i64)

/* Forward of the rows [r0, r1): idx (k per row) of the k largest b, and with the selected
 * logits l (clamped at `lowest`) and b, paired by perm, mixed = (b l + b_π l_π - eps/tau)
 * / (b + b_π + eps); logx = log Σ e^mixed; own = b e^mixed / den, pair = b_π e^mixed / den
 * (both 0 where l lies below `lowest`), total = Σ e^mixed: the factors of backward. */
#define DEFINE_FORWARD(NAME, T, KEY, SELECT, EXP)                                         \
    int NAME(const T *b, int64_t n, const T *logits, int64_t s0, int64_t s1,             \
             const int64_t *perm, int64_t k, double tau, double eps, int64_t r0,         \
             int64_t r1, int32_t *idx, T *own, T *pair, T *total, T *logx, int threads) { \
        const T lowest = (T)(-2.0 / tau), shift = (T)(eps / tau);                        \
        int failed = 0;                                                                  \
        _Pragma("omp parallel num_threads(threads) reduction(|| : failed)") {           \
            int32_t *hist = malloc(sizeof(int32_t) << RADIX_BITS);                       \
            KEY *cand = malloc(sizeof(KEY) * (size_t)(n + 8));                           \
            int32_t *cols = malloc(sizeof(int32_t) * (size_t)(n + 8));                   \
            T *l = malloc(sizeof(T) * (size_t)k), *bt = malloc(sizeof(T) * (size_t)k);  \
            T *den = malloc(sizeof(T) * (size_t)k);                                      \
            char *below = malloc((size_t)k);                                             \
            int ok = hist && cand && cols && l && bt && den && below;                    \
            _Pragma("omp for schedule(static)")                                          \
            for (int64_t r = r0; r < r1; r++) {                                          \
                if (!ok) {                                                               \
                    failed = 1;                                                          \
                    continue;                                                            \
                }                                                                        \
                const T *brow = b + r * n;                                               \
                int32_t *ir = idx + r * k;                                               \
                T *o = own + r * k, *p = pair + r * k;                                   \
                SELECT((const KEY *)brow, n, k, ir, hist, cand, cols);                   \
                for (int64_t a = 0; a < k; a++) {                                        \
                    if (a + 24 < k) __builtin_prefetch(logits + r * s0 + (int64_t)ir[a + 24] * s1); \
                    T la = logits[r * s0 + (int64_t)ir[a] * s1];                         \
                    l[a] = la < lowest ? lowest : la, below[a] = la < lowest;            \
                    bt[a] = brow[ir[a]];                                                 \
                }                                                                        \
                for (int64_t a = 0; a < k; a++) { /* o: mixed, then e^mixed; p: b_π */   \
                    int64_t q = perm[a];                                                 \
                    den[a] = bt[a] + bt[q] + (T)eps, p[a] = bt[q];                       \
                    o[a] = (bt[a] * l[a] + bt[q] * l[q] - shift) / den[a];               \
                }                                                                        \
                for (int64_t a = 0; a < k; a++) o[a] = EXP(o[a]);                        \
                double sum[4] = {0.0, 0.0, 0.0, 0.0};                                    \
                for (int64_t a = 0; a < k; a++) sum[a & 3] += o[a];                      \
                for (int64_t a = 0; a < k; a++) {                                        \
                    T soft = below[a] ? (T)0 : o[a] / den[a];                            \
                    o[a] = bt[a] * soft, p[a] *= soft;                                   \
                }                                                                        \
                const double total_r = (sum[0] + sum[1]) + (sum[2] + sum[3]);            \
                total[r] = (T)total_r, logx[r] = (T)log(total_r);                                \
            }                                                                            \
            free(hist), free(cand), free(cols), free(l), free(bt), free(den), free(below); \
        }                                                                                \
        return failed;                                                                   \
    }

DEFINE_FORWARD(mix_forward_f32, float, int32_t, select_f32, expf)
DEFINE_FORWARD(mix_forward_f64, double, int64_t, select_f64, exp)

/* Backward of the rows [r0, r1): with scale = grad / (total tau), adds own·scale at the
 * selected columns and pair·scale at their partners' (position perm[a]) to
 * out[r * s0 + c * s1]. */
#define DEFINE_BACKWARD(NAME, T)                                                          \
    int NAME(const T *grad, const T *total, const T *own, const T *pair,                 \
             const int32_t *idx, const int64_t *perm, int64_t k, double tau, int64_t r0, \
             int64_t r1, T *out, int64_t s0, int64_t s1, int threads) {                  \
        int failed = 0;                                                                  \
        _Pragma("omp parallel num_threads(threads) reduction(|| : failed)") {           \
            T *g = malloc(sizeof(T) * (size_t)k);                                        \
            _Pragma("omp for schedule(static)")                                          \
            for (int64_t r = r0; r < r1; r++) {                                          \
                if (!g) {                                                                \
                    failed = 1;                                                          \
                    continue;                                                            \
                }                                                                        \
                const T scale = grad[r] / (total[r] * (T)tau);                           \
                const T *o = own + r * k, *p = pair + r * k;                             \
                const int32_t *ir = idx + r * k;                                         \
                for (int64_t a = 0; a < k; a++) g[a] = o[a] * scale;                     \
                for (int64_t a = 0; a < k; a++) g[perm[a]] += p[a] * scale;              \
                for (int64_t a = 0; a < k; a++) {                                        \
                    if (a + 24 < k) __builtin_prefetch(out + r * s0 + (int64_t)ir[a + 24] * s1, 1); \
                    out[r * s0 + (int64_t)ir[a] * s1] += g[a];                           \
                }                                                                        \
            }                                                                            \
            free(g);                                                                     \
        }                                                                                \
        return failed;                                                                   \
    }

DEFINE_BACKWARD(mix_backward_f32, float)
DEFINE_BACKWARD(mix_backward_f64, double)
