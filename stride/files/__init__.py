"""Files stride writes beside the user's: tagged temporary names (whose process wrote them, so clean-up
removes only stride's own left-overs), the run-folder lock (one run per folder), and what a folder holds
(a train run, bench results, a sweep: folder_kind, so no command writes into another's folder)."""
