"""An agent reading streams with the official openai SDK through abridge:
it marks the file named by argv[1] as soon as the first piece of a paused
stream arrives, reads the rest once the upstream goes on, then leaves an
endless stream after three chunks. Prints what it read, as JSON."""
import json
import sys

import openai

oa = openai.OpenAI(max_retries=0)
pieces = []
for chunk in oa.chat.completions.create(model="paused", messages=[], stream=True):
    if chunk.choices and chunk.choices[0].delta.content:
        pieces.append(chunk.choices[0].delta.content)
        if len(pieces) == 1:
            with open(sys.argv[1], "w") as marker:
                marker.write("first")

endless = oa.chat.completions.create(model="endless", messages=[], stream=True)
read = 0
for chunk in endless:
    read += 1
    if read == 3:
        break
endless.close()

json.dump({"paused": pieces, "endless_read": read}, sys.stdout)
