"""Budgets for ``limit`` scopes: ``from op.budget import Budget``."""

from op._values import Budget, BudgetExhausted, Spent

__all__ = ["Budget", "BudgetExhausted", "Spent"]
