// #include "commented.h"
/* #include "block.h"
 */ #include "b.h"
const char *s = "#include \"string.h\"";
char c = '#';
