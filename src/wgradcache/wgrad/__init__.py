"""The wgrad kernel generators, written once against the kernel IR: the ABI they take, the
operands, copies, K loops and epilogues they are made of, the stage-2 reducer, ``serves`` (what a
kernel can compute) and the split-K policy. ``emit`` is the one door to them."""
