"""What people read: the console (rich) and report.html / sweep.html / compare.html."""
