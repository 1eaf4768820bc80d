"""The tabular release kind's mathematics (Bindschaedler, Shokri, Gunter, VLDB 2017; PrivBayes-style
learning, Zhang et al., SIGMOD 2014): engine-free, on integer-coded record matrices."""
