"""The asynchronous mode (FedBuff): global versions instead of rounds, staleness weights, the buffer."""
