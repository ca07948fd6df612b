#include "a.h"
  #  include   <sub/c.h>  
#include "unterminated
#include <>
#include ""
