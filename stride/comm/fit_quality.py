"""How well an alpha-beta fit must explain its timings before its bandwidth is used (no imports: the planner reads
it without loading numpy or torch)."""

# A fit whose line explains less than this share of the timings' variance gives no bandwidth. R^2 <= 0 is a line
# no better than the timings' mean (it explains nothing); the floor is above 0 because a line that explains a fifth
# of the spread is still mostly noise. Measured with gloo on a 2-core Intel Xeon VM (2 ranks, --iters 5, one run
# per --max-bytes, bandwidths against the 16M run's, whose fits had R^2 0.78-0.96): up to 64K and 1M every fit but
# one had R^2 < 0, bandwidths 0.19x-2.5x; up to 4M, R^2 0.51-0.70, 0.57x-1.31x (docs/analyze.md, Hardware profile).
# The planner's reader (perfmodel.hardware.read_comm_profile) applies it too, to profiles written before it.
MIN_R2 = 0.5
