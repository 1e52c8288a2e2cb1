"""An example of a user's own model and data package for stride (see README, "Your own model and data")."""
