"""Plain-PyTorch EAGLE-3 reference: the drafter forward and aux hidden-state capture from HF targets."""
