"""What the paper publishes that this report sets beside its own figures.

Table 3's graph sizes come from the model registry (`ModelSpec.paper_table3`).
The per-case values of the paper's Tables 4 and 5 are not in this repository
(the stored copy of the article gives its abstract, not its tables), so those
columns carry the paper's headline claim instead of invented numbers.
"""

#: Zeng et al., Algorithms 2022, 15(4), 108, abstract (https://www.mdpi.com/1999-4893/15/4/108)
CLAIM_VS_HIERARCHICAL = ("up to 5% lower runtime, communication and memory than Hierarchical, and up to "
                         "40% faster strategy search")
TABLES_4_5_NOTE = "the paper's per-case Table 4 and 5 values are not in this repository; its claim: " \
                  + CLAIM_VS_HIERARCHICAL
