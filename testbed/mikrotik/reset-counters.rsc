# Zero the bottleneck's counters (bytes, packets, dropped) before a run.
/queue tree reset-counters [find name=ccs-bottleneck]
:put "ccs-bottleneck counters reset"
