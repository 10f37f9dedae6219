/*
 * ditto.c — public API.
 *
 * Today this header exposes the version, the error codes and the logger
 * types; the pipeline API (model set, avatar session, audio in, frames out)
 * is added as the pipeline lands.
 */
#ifndef DITTO_H
#define DITTO_H

#include "ditto/ditto_error.h"
#include "ditto/ditto_types.h"
#include "ditto/ditto_version.h"

#endif /* DITTO_H */
