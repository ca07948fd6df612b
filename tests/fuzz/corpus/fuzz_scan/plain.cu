#include "a.h"
#include <c.h>
extern "C" __global__ void k(float *x) { x[0] = B; }
