"""One screen per section: servers, run, results, retrain (plus the help dialog)."""
