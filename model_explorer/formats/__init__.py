# More dimensions than any real tensor has (numpy 2 allows 64). Readers refuse longer shapes
# from a file before anything multiplies them out: the product of millions of dimensions
# takes hours, and its digits do not fit in a message.
MAX_RANK = 64
