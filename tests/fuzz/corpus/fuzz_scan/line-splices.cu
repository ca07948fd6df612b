#\
 include "a.h"
#inc\
lude "b.h"
#include "sub/\
c.h"
