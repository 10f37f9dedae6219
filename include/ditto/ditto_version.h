/* ditto.c — version macros and symbol visibility. */
#ifndef DITTO_VERSION_H
#define DITTO_VERSION_H

#define DITTO_VERSION_MAJOR 0
#define DITTO_VERSION_MINOR 1
#define DITTO_VERSION_PATCH 0

#if defined(DITTO_BUILDING_LIBRARY) && defined(__GNUC__)
#define DITTO_API __attribute__((visibility("default")))
#else
#define DITTO_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/** @return the library version as "MAJOR.MINOR.PATCH"; static storage. */
DITTO_API const char *ditto_version(void);

#ifdef __cplusplus
}
#endif
#endif /* DITTO_VERSION_H */
