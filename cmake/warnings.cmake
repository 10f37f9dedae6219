# Strict C11 warnings for our own code.
set(DITTO_WARNINGS
  -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes -Wmissing-prototypes
  -Wundef -Wvla -Wformat=2 -Wno-unused-parameter -Werror=implicit-function-declaration
  -Werror=vla -Werror=return-type -Werror=incompatible-pointer-types)
add_compile_options("$<$<COMPILE_LANGUAGE:C>:${DITTO_WARNINGS}>")
