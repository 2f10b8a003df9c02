"""Policies that act in a world: oracle and null now; random, noisy and chat agents later."""
