/* profile.c built without frame pointers (a program as most distributions build them): the
 * profile's stacks are shallow, and still name each allocation's caller. */
#pragma GCC optimize("omit-frame-pointer")
#define PROFILE_NAME "profile_nofp"
#include "profile.c"
