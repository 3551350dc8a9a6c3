"""Studies made of benchmark runs: `draftbench tune` (tune*.py: the search over a drafter's configs) and
`draftbench breakeven` (breakeven.py: forced accept lengths against the baseline)."""
