/* A source whose kernel templates all come from the header it includes. */
#include "include/compat/hdr_templates.cuh"
