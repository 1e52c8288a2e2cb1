"""Files stride writes beside the user's: tagged temporary names (whose process wrote them, so clean-up
removes only stride's own left-overs) and the run-folder lock (one run per folder)."""
