/* x *\
/ #include "in.h" */
#include "out.h"
// c \
#include "spliced.h"
int x = 1'000; /* 
#include "hidden.h" */
u8\
R"x(
#include "raw.h"
)x"
??=include "tri.h"
