/* A lane plugin built against a future lane ABI (7): pipelane must refuse it before reading more. */
#include "lanes/pipelane_lane.h"

static const pipelane_lane_plugin future_plugin = {7u, (uint32_t)sizeof(pipelane_lane_plugin), "future", "things",
                                                   NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};

#if defined(__GNUC__)
__attribute__((visibility("default")))
#endif
const pipelane_lane_plugin* pipelane_lane_plugin_v1(void) { return &future_plugin; }
