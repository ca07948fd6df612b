#/**/include "a.h"
#include/**/"b.h"
%:include <c.h>
#include "d.cuh"
