"""sprout-fleet: Flower apps that fine-tune one sprout model across edge boxes running `sprout serve`."""
