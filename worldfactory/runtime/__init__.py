"""The runtime: open a bundle, run episodes on private copies of the seed, grade by state."""
