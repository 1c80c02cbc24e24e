# Metrics export: the Prometheus text exposition of pager and node metrics
# (include/htp/prometheus.hpp). It reads the snapshots the pager and the node take.
target_sources(htp_objects PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/prometheus.cpp
)
