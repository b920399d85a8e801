"""Mask maths on MASK tensors `[B, H, W]` (1 = selected): feathering, growing and shrinking,
combining, selecting by colour. Pure torch functions; the mask nodes (nodes/mask.py) call them."""
