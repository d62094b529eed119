"""Iris classification with multi-output GP trees (scikit-learn style).

Run: python examples/gp_classification.py
"""

from tfevo.gp import SymbolicClassifier
from tfevo.problems.classification import iris
from _toy import budget  # TFEVO_EXAMPLE_TOY=1: a few seconds, for the test suite

prob = iris(test_size=0.3, seed=0)
clf = SymbolicClassifier(population_size=budget(1000, 50), generations=budget(20, 2), max_len=64, tournament_size=7, random_state=0)
clf.fit(prob.x.numpy(), prob.labels.numpy())
print("train accuracy", clf.score(prob.x.numpy(), prob.labels.numpy()))
print("test accuracy ", clf.score(prob.x_test.numpy(), prob.y_test.numpy()))
print("program:", clf)
model = clf.to_keras()  # a keras.Model with the same class scores
print(model(prob.x_test.numpy()[:3]))
