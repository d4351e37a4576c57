"""The perception layer: detectors and the layered perception -> estimation -> decision chain."""
