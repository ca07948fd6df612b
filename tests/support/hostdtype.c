/* Host storage of jitop's dtypes (hostdtype.h). Linked into every test
 * program (the Makefile's TEST_SUPPORT); without _Float16 this file is
 * empty, so that the CPU test programs build as before, and hostdtype.h
 * stops the build of the GPU tests that need it with a message. */
#include <stdint.h>
#include <string.h>

#ifdef __FLT16_MAX__
#include "hostdtype.h"

static uint16_t f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40); /* NaN stays NaN */
    u += 0x7fffu + ((u >> 16) & 1u);        /* round to nearest even */
    return (uint16_t)(u >> 16);
}

static float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

const char *jt_dname(jitop_dtype dt)
{
    return dt == JITOP_FLOAT32 ? "f32" : dt == JITOP_FLOAT16 ? "f16" : "bf16";
}

float jt_dstore(jitop_dtype dt, void *buf, size_t i, float v)
{
    if (dt == JITOP_FLOAT32) {
        ((float *)buf)[i] = v;
        return v;
    }
    if (dt == JITOP_FLOAT16) {
        _Float16 h = (_Float16)v;
        memcpy((char *)buf + 2 * i, &h, 2);
        return (float)h;
    }
    uint16_t b = f32_to_bf16(v);
    memcpy((char *)buf + 2 * i, &b, 2);
    return bf16_to_f32(b);
}

double jt_dload(jitop_dtype dt, const void *buf, size_t i)
{
    if (dt == JITOP_FLOAT32)
        return ((const float *)buf)[i];
    uint16_t b;
    memcpy(&b, (const char *)buf + 2 * i, 2);
    if (dt == JITOP_FLOAT16) {
        _Float16 h;
        memcpy(&h, &b, 2);
        return (double)h;
    }
    return bf16_to_f32(b);
}

#endif /* __FLT16_MAX__ */
