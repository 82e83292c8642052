"""What every part of the core shares: the injectable clock, crash-safe files, work in slices, the one
poll helper, the percentile, the loop-lag probe and the control loop."""
