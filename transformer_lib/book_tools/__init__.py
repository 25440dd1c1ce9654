"""The book's own machinery, apart from the model code: claims and glued numbers, timing with intervals,
peak tensor memory. Only the experiments and exercises import it."""
