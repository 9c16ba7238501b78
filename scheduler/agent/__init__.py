"""The node agent: GPU discovery, inventory annotation and the kubelet device plugin."""
