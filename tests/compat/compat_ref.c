/* Exact CPU references for the compatibility suite: binary16 and bfloat16
 * rounding, cuRAND's Philox4x32-10, and ulp sizes for tolerances. */
#include "compat_env.h"

#include <float.h>
#include <math.h>
#include <string.h>

double cx_ulp_f32(double x)
{
    double a = fabs(x);
    if (a < FLT_MIN)
        return 0x1p-149;
    return ldexp(1.0, ilogb(a) - 23);
}

double cx_ulp_f64(double x)
{
    double a = fabs(x);
    if (a < DBL_MIN)
        return 0x1p-1074;
    return ldexp(1.0, ilogb(a) - 52);
}

uint32_t cx_f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* nearbyint rounds half to even in the default rounding mode, which the
 * tests never change. */
uint16_t cx_half_from_double(double x)
{
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    double a = fabs(x);
    if (isnan(x))
        return sign | 0x7E00;
    /* 65504 is the largest half; 65520, halfway to 65536, rounds to even:
     * infinity. */
    if (a >= 65520.0)
        return sign | 0x7C00;
    if (a < 0x1p-14) {
        /* Subnormal: multiples of 2^-24. A result of 1024 is the smallest
         * normal, whose encoding is exactly 1024. */
        return sign | (uint16_t)nearbyint(a * 0x1p24);
    }
    int e = 0;
    frexp(a, &e); /* a in [2^(e-1), 2^e) */
    double s = nearbyint(ldexp(a, 11 - e)); /* 11 significant bits: [1024, 2048] */
    if (s == 2048.0) {
        s = 1024.0;
        e++;
    }
    int biased = e - 1 + 15;
    if (biased >= 31)
        return sign | 0x7C00;
    return sign | (uint16_t)(biased << 10) | (uint16_t)(s - 1024.0);
}

double cx_half_to_double(uint16_t h)
{
    double sign = (h & 0x8000) ? -1.0 : 1.0;
    int biased = (h >> 10) & 0x1F;
    int frac = h & 0x3FF;
    if (biased == 0)
        return sign * ldexp(frac, -24);
    if (biased == 31)
        return frac ? NAN : sign * INFINITY;
    return sign * ldexp(1024 + frac, biased - 25);
}

uint16_t cx_bf16_from_float(float x)
{
    uint32_t u = cx_f32_bits(x);
    if (isnan(x))
        return (uint16_t)((u >> 16) | 0x0040);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float cx_bf16_to_float(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Philox4x32-10 as curand_philox4x32_x.h writes it. */
#define PHILOX_W32_0 0x9E3779B9u
#define PHILOX_W32_1 0xBB67AE85u
#define PHILOX_M4x32_0 0xD2511F53u
#define PHILOX_M4x32_1 0xCD9E8D57u

static void philox_round(uint32_t c[4], const uint32_t k[2])
{
    uint64_t p0 = (uint64_t)PHILOX_M4x32_0 * c[0];
    uint64_t p1 = (uint64_t)PHILOX_M4x32_1 * c[2];
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    uint32_t r[4] = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
    memcpy(c, r, sizeof r);
}

static void philox10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    uint32_t c[4], k[2] = {key[0], key[1]};
    memcpy(c, ctr, sizeof c);
    for (int round = 0; round < 10; round++) {
        if (round > 0) {
            k[0] += PHILOX_W32_0;
            k[1] += PHILOX_W32_1;
        }
        philox_round(c, k);
    }
    memcpy(out, c, sizeof c);
}

/* Philox_State_Incr(state, n), carries as the header does them. */
static void philox_incr(cx_philox *p, uint64_t n)
{
    uint32_t nlo = (uint32_t)n, nhi = (uint32_t)(n >> 32);
    p->ctr[0] += nlo;
    if (p->ctr[0] < nlo)
        nhi++;
    p->ctr[1] += nhi;
    if (nhi <= p->ctr[1])
        return;
    if (++p->ctr[2])
        return;
    ++p->ctr[3];
}

/* Philox_State_Incr(state): the counter's next value. */
static void philox_incr1(cx_philox *p)
{
    if (++p->ctr[0])
        return;
    if (++p->ctr[1])
        return;
    if (++p->ctr[2])
        return;
    ++p->ctr[3];
}

void cx_philox_init(cx_philox *p, uint64_t seed, uint64_t subsequence, uint64_t offset)
{
    memset(p, 0, sizeof *p);
    p->key[0] = (uint32_t)seed;
    p->key[1] = (uint32_t)(seed >> 32);
    /* skipahead_sequence(subsequence): the counter's high half. */
    uint32_t nlo = (uint32_t)subsequence, nhi = (uint32_t)(subsequence >> 32);
    p->ctr[2] += nlo;
    if (p->ctr[2] < nlo)
        nhi++;
    p->ctr[3] += nhi;
    philox10(p->ctr, p->key, p->output);
    /* skipahead(offset): whole blocks of four, then a position in one. */
    p->state += (unsigned)(offset & 3);
    uint64_t n = offset / 4;
    if (p->state > 3) {
        n += 1;
        p->state -= 4;
    }
    philox_incr(p, n);
    philox10(p->ctr, p->key, p->output);
}

uint32_t cx_philox_next(cx_philox *p)
{
    uint32_t ret = p->output[p->state & 3];
    if (++p->state == 4) {
        philox_incr1(p);
        philox10(p->ctr, p->key, p->output);
        p->state = 0;
    }
    return ret;
}

float cx_curand_uniform(uint32_t bits)
{
    /* CURAND_2POW32_INV is 2^-32 as a float literal: the product is exact,
     * so a fused multiply-add on the device rounds the same way. */
    const float inv = 2.3283064e-10f;
    return (float)bits * inv + (inv / 2.0f);
}
