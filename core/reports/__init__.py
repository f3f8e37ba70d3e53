"""Reports: the JSON report, the offline HTML report and saved runs."""
