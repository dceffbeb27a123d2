#!/bin/bash
/app/hello > /app/out.txt
