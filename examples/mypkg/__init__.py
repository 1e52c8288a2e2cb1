"""An example of a user's own model package for stride (see README, "Your own model and data")."""
