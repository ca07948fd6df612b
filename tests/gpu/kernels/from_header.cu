// Everything this module runs comes from the header.
#include "from_header.cuh"
