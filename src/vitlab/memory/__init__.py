"""How much memory a model and its batches need, and how much this process may still allocate:
every reader of weights and every command checks a model here before it is built (budget.py)."""
