"""A local stand-in for the Hugging Face Hub, answering from recorded JSON fixtures."""

from tests.support.hubstub.server import HubStub, Request

__all__ = ["HubStub", "Request"]
