"""How wide a step should be: the width choice and back-off, the batch budgets, the cost curve, calibration and
its prior."""
