"""The renderer worker: claims minibatch tasks and runs their episodes, each simulator in its own process."""
