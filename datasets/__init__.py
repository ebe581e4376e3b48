"""Captured traces: the corpus the DQN is trained on (issue 4).

* ``trace.py``     -- the format: one folder per capture, ``samples.parquet`` (the FlowSample
                      schema of ccswitch/schema.py) + ``manifest.json``; reading with validation
* ``capture.py``   -- recording from the ccswitch monitor: live, or one arm in a tbf bottleneck
* ``importers.py`` -- iperf3 JSON and tshark (pcap or fields) into the same format
* ``corpus.py``    -- the corpus matrix (specs/*.toml) and its builder (tbf or testbed runner)
* ``synthetic.py`` -- a small synthetic corpus for tests
* ``card.py``      -- the dataset card: numbers computed from a corpus into its README.md
* ``sample/``      -- the sample corpus shipped in the repository (dataset card: sample/README.md)

Command line: ``ccswitch dataset --help``.
"""
