"""Flower runtimes: the same composed algorithms, with clients as Flower SuperNodes.

``run.runtime: flower-simulation`` runs them on Flower's simulation engine (Ray); ``fedaccel
deploy`` on a SuperLink and SuperNodes (separate processes, or hosts). Both write the run folder
of the in-process runtime. :mod:`fedaccel.flower.wire` is what crosses the network.
"""
