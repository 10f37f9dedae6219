/* Every runner table of `ditto verify`; a new area adds its table here. */
#include <stddef.h>

#include "tools/verify.h"

const DittoVerifyRunner *const ditto_verify_tables[] = {
    ditto_verify_runners_models,
    ditto_verify_runners_motion,
    ditto_verify_runners_lmdm,
    ditto_verify_runners_media,
    ditto_verify_runners_onnx,
    NULL,
};
