/* A shared library that is not a lane plugin: it lacks pipelane_lane_plugin_v1. */
#if defined(__GNUC__)
__attribute__((visibility("default")))
#endif
int some_other_entry_point(void) { return 42; }
