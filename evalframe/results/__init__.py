"""What a run produces and everything computed from it: the nouns (items, scores, the run), intervals,
agreement with people, paired comparisons, the objective, the gate, and the files a run directory keeps."""
