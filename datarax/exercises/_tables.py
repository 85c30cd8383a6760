"""The answer keys' answers to the public cases of the notebooks' exercises, on 8
devices: written by ``python -m datarax.exercises._keys``, do not edit.

`datarax.exercises._cases.reference` reads them where the keys are not loaded.
"""

# ruff: noqa: E501  (a case is named on one line)
import json

TABLES = json.loads(
    """
{
 "01.host_fraction": {
  "cases": [
   "P('data') on a (8,) mesh, 2 hosts, host 0",
   "P('data') on a (8,) mesh, 2 hosts, host 1",
   "P('data') on a (8,) mesh, 4 hosts, host 0",
   "P('data') on a (8,) mesh, 4 hosts, host 1",
   "P('data') on a (8,) mesh, 4 hosts, host 2",
   "P('data') on a (8,) mesh, 4 hosts, host 3",
   "P() on a (8,) mesh, 2 hosts, host 0",
   "P() on a (8,) mesh, 2 hosts, host 1",
   "P() on a (8,) mesh, 4 hosts, host 0",
   "P() on a (8,) mesh, 4 hosts, host 1",
   "P() on a (8,) mesh, 4 hosts, host 2",
   "P() on a (8,) mesh, 4 hosts, host 3",
   "P('data', 'model') on a (4, 2) mesh, 2 hosts, host 0",
   "P('data', 'model') on a (4, 2) mesh, 2 hosts, host 1",
   "P('data', 'model') on a (4, 2) mesh, 4 hosts, host 0",
   "P('data', 'model') on a (4, 2) mesh, 4 hosts, host 1",
   "P('data', 'model') on a (4, 2) mesh, 4 hosts, host 2",
   "P('data', 'model') on a (4, 2) mesh, 4 hosts, host 3",
   "P('data') on a (4, 2) mesh, 2 hosts, host 0",
   "P('data') on a (4, 2) mesh, 2 hosts, host 1",
   "P('data') on a (4, 2) mesh, 4 hosts, host 0",
   "P('data') on a (4, 2) mesh, 4 hosts, host 1",
   "P('data') on a (4, 2) mesh, 4 hosts, host 2",
   "P('data') on a (4, 2) mesh, 4 hosts, host 3",
   "P('model') on a (4, 2) mesh, 2 hosts, host 0",
   "P('model') on a (4, 2) mesh, 2 hosts, host 1",
   "P('model') on a (4, 2) mesh, 4 hosts, host 0",
   "P('model') on a (4, 2) mesh, 4 hosts, host 1",
   "P('model') on a (4, 2) mesh, 4 hosts, host 2",
   "P('model') on a (4, 2) mesh, 4 hosts, host 3",
   "P(None, 'model') on a (4, 2) mesh, 2 hosts, host 0",
   "P(None, 'model') on a (4, 2) mesh, 2 hosts, host 1",
   "P(None, 'model') on a (4, 2) mesh, 4 hosts, host 0",
   "P(None, 'model') on a (4, 2) mesh, 4 hosts, host 1",
   "P(None, 'model') on a (4, 2) mesh, 4 hosts, host 2",
   "P(None, 'model') on a (4, 2) mesh, 4 hosts, host 3",
   "P('data', 'model') on a (4, 2) mesh listing the devices backwards, 2 hosts, host 0",
   "P('data', 'model') on a (4, 2) mesh listing the devices backwards, 2 hosts, host 1",
   "P('data', 'model') on a (4, 2) mesh listing the devices backwards, 4 hosts, host 0",
   "P('data', 'model') on a (4, 2) mesh listing the devices backwards, 4 hosts, host 1",
   "P('data', 'model') on a (4, 2) mesh listing the devices backwards, 4 hosts, host 2",
   "P('data', 'model') on a (4, 2) mesh listing the devices backwards, 4 hosts, host 3",
   "P('data') on a (4, 2) mesh whose 'model' axis spans 2 hosts, 2 hosts, host 0",
   "P('data') on a (4, 2) mesh whose 'model' axis spans 2 hosts, 2 hosts, host 1",
   "P('data') on a (4, 2) mesh whose 'model' axis spans 2 hosts, 4 hosts, host 0",
   "P('data') on a (4, 2) mesh whose 'model' axis spans 2 hosts, 4 hosts, host 1",
   "P('data') on a (4, 2) mesh whose 'model' axis spans 2 hosts, 4 hosts, host 2",
   "P('data') on a (4, 2) mesh whose 'model' axis spans 2 hosts, 4 hosts, host 3",
   "P('model') on a (4, 2) mesh whose 'model' axis spans 2 hosts, 2 hosts, host 0",
   "P('model') on a (4, 2) mesh whose 'model' axis spans 2 hosts, 2 hosts, host 1",
   "P('model') on a (4, 2) mesh whose 'model' axis spans 2 hosts, 4 hosts, host 0",
   "P('model') on a (4, 2) mesh whose 'model' axis spans 2 hosts, 4 hosts, host 1",
   "P('model') on a (4, 2) mesh whose 'model' axis spans 2 hosts, 4 hosts, host 2",
   "P('model') on a (4, 2) mesh whose 'model' axis spans 2 hosts, 4 hosts, host 3",
   "P(None, 'model') on a (4, 2) mesh of devices [0, 7, 6, 2, 5, 1, 3, 4], 2 hosts, host 0",
   "P(None, 'model') on a (4, 2) mesh of devices [0, 7, 6, 2, 5, 1, 3, 4], 2 hosts, host 1",
   "P(None, 'model') on a (4, 2) mesh of devices [0, 7, 6, 2, 5, 1, 3, 4], 4 hosts, host 0",
   "P(None, 'model') on a (4, 2) mesh of devices [0, 7, 6, 2, 5, 1, 3, 4], 4 hosts, host 1",
   "P(None, 'model') on a (4, 2) mesh of devices [0, 7, 6, 2, 5, 1, 3, 4], 4 hosts, host 2",
   "P(None, 'model') on a (4, 2) mesh of devices [0, 7, 6, 2, 5, 1, 3, 4], 4 hosts, host 3"
  ],
  "expected": [
   0.5,
   0.5,
   0.25,
   0.25,
   0.25,
   0.25,
   1.0,
   1.0,
   1.0,
   1.0,
   1.0,
   1.0,
   0.5,
   0.5,
   0.25,
   0.25,
   0.25,
   0.25,
   0.5,
   0.5,
   0.25,
   0.25,
   0.25,
   0.25,
   1.0,
   1.0,
   1.0,
   1.0,
   1.0,
   1.0,
   1.0,
   1.0,
   1.0,
   1.0,
   1.0,
   1.0,
   0.5,
   0.5,
   0.25,
   0.25,
   0.25,
   0.25,
   1.0,
   1.0,
   0.5,
   0.5,
   0.5,
   0.5,
   0.5,
   0.5,
   0.5,
   0.5,
   0.5,
   0.5,
   1.0,
   1.0,
   1.0,
   1.0,
   1.0,
   1.0
  ]
 },
 "02.devices_holding": {
  "cases": [
   "element (0, 0) of a (16, 16) array with P('data') on a (4, 2) mesh",
   "element (15, 1) of a (16, 16) array with P('data') on a (4, 2) mesh",
   "element (9, 7) of a (16, 16) array with P('data') on a (4, 2) mesh",
   "element (3, 14) of a (16, 16) array with P('data') on a (4, 2) mesh",
   "element (2, 9) of a (16, 16) array with P('data') on a (4, 2) mesh",
   "element (0, 0) of a (16, 16) array with P('model') on a (4, 2) mesh",
   "element (15, 1) of a (16, 16) array with P('model') on a (4, 2) mesh",
   "element (9, 7) of a (16, 16) array with P('model') on a (4, 2) mesh",
   "element (3, 14) of a (16, 16) array with P('model') on a (4, 2) mesh",
   "element (13, 1) of a (16, 16) array with P('model') on a (4, 2) mesh",
   "element (0, 0) of a (16, 16) array with P() on a (4, 2) mesh",
   "element (15, 1) of a (16, 16) array with P() on a (4, 2) mesh",
   "element (9, 7) of a (16, 16) array with P() on a (4, 2) mesh",
   "element (3, 14) of a (16, 16) array with P() on a (4, 2) mesh",
   "element (15, 3) of a (16, 16) array with P() on a (4, 2) mesh",
   "element (0, 0) of a (16, 16) array with P('data', 'model') on a (4, 2) mesh",
   "element (15, 1) of a (16, 16) array with P('data', 'model') on a (4, 2) mesh",
   "element (9, 7) of a (16, 16) array with P('data', 'model') on a (4, 2) mesh",
   "element (3, 14) of a (16, 16) array with P('data', 'model') on a (4, 2) mesh",
   "element (0, 10) of a (16, 16) array with P('data', 'model') on a (4, 2) mesh",
   "element (0, 0) of a (16, 16) array with P('model', 'data') on a (4, 2) mesh",
   "element (15, 1) of a (16, 16) array with P('model', 'data') on a (4, 2) mesh",
   "element (9, 7) of a (16, 16) array with P('model', 'data') on a (4, 2) mesh",
   "element (3, 14) of a (16, 16) array with P('model', 'data') on a (4, 2) mesh",
   "element (6, 3) of a (16, 16) array with P('model', 'data') on a (4, 2) mesh",
   "element (0, 0) of a (16, 16) array with P(None, 'model') on a (4, 2) mesh",
   "element (15, 1) of a (16, 16) array with P(None, 'model') on a (4, 2) mesh",
   "element (9, 7) of a (16, 16) array with P(None, 'model') on a (4, 2) mesh",
   "element (3, 14) of a (16, 16) array with P(None, 'model') on a (4, 2) mesh",
   "element (6, 5) of a (16, 16) array with P(None, 'model') on a (4, 2) mesh",
   "element (0, 0) of a (16, 16) array with P(('data', 'model')) on a (4, 2) mesh",
   "element (15, 1) of a (16, 16) array with P(('data', 'model')) on a (4, 2) mesh",
   "element (9, 7) of a (16, 16) array with P(('data', 'model')) on a (4, 2) mesh",
   "element (3, 14) of a (16, 16) array with P(('data', 'model')) on a (4, 2) mesh",
   "element (10, 6) of a (16, 16) array with P(('data', 'model')) on a (4, 2) mesh",
   "element (0, 0) of a (16, 16) array with P(('model', 'data'), None) on a (4, 2) mesh",
   "element (15, 1) of a (16, 16) array with P(('model', 'data'), None) on a (4, 2) mesh",
   "element (9, 7) of a (16, 16) array with P(('model', 'data'), None) on a (4, 2) mesh",
   "element (3, 14) of a (16, 16) array with P(('model', 'data'), None) on a (4, 2) mesh",
   "element (11, 0) of a (16, 16) array with P(('model', 'data'), None) on a (4, 2) mesh",
   "element (0, 0) of a (16, 16) array with P('data') on a (2, 4) mesh",
   "element (15, 1) of a (16, 16) array with P('data') on a (2, 4) mesh",
   "element (9, 7) of a (16, 16) array with P('data') on a (2, 4) mesh",
   "element (3, 14) of a (16, 16) array with P('data') on a (2, 4) mesh",
   "element (13, 15) of a (16, 16) array with P('data') on a (2, 4) mesh",
   "element (0, 0) of a (16, 16) array with P('model') on a (2, 4) mesh",
   "element (15, 1) of a (16, 16) array with P('model') on a (2, 4) mesh",
   "element (9, 7) of a (16, 16) array with P('model') on a (2, 4) mesh",
   "element (3, 14) of a (16, 16) array with P('model') on a (2, 4) mesh",
   "element (7, 13) of a (16, 16) array with P('model') on a (2, 4) mesh",
   "element (0, 0) of a (16, 16) array with P() on a (2, 4) mesh",
   "element (15, 1) of a (16, 16) array with P() on a (2, 4) mesh",
   "element (9, 7) of a (16, 16) array with P() on a (2, 4) mesh",
   "element (3, 14) of a (16, 16) array with P() on a (2, 4) mesh",
   "element (1, 13) of a (16, 16) array with P() on a (2, 4) mesh",
   "element (0, 0) of a (16, 16) array with P('data', 'model') on a (2, 4) mesh",
   "element (15, 1) of a (16, 16) array with P('data', 'model') on a (2, 4) mesh",
   "element (9, 7) of a (16, 16) array with P('data', 'model') on a (2, 4) mesh",
   "element (3, 14) of a (16, 16) array with P('data', 'model') on a (2, 4) mesh",
   "element (0, 10) of a (16, 16) array with P('data', 'model') on a (2, 4) mesh",
   "element (0, 0) of a (16, 16) array with P('model', 'data') on a (2, 4) mesh",
   "element (15, 1) of a (16, 16) array with P('model', 'data') on a (2, 4) mesh",
   "element (9, 7) of a (16, 16) array with P('model', 'data') on a (2, 4) mesh",
   "element (3, 14) of a (16, 16) array with P('model', 'data') on a (2, 4) mesh",
   "element (10, 14) of a (16, 16) array with P('model', 'data') on a (2, 4) mesh",
   "element (0, 0) of a (16, 16) array with P(None, 'model') on a (2, 4) mesh",
   "element (15, 1) of a (16, 16) array with P(None, 'model') on a (2, 4) mesh",
   "element (9, 7) of a (16, 16) array with P(None, 'model') on a (2, 4) mesh",
   "element (3, 14) of a (16, 16) array with P(None, 'model') on a (2, 4) mesh",
   "element (11, 11) of a (16, 16) array with P(None, 'model') on a (2, 4) mesh",
   "element (0, 0) of a (16, 16) array with P(('data', 'model')) on a (2, 4) mesh",
   "element (15, 1) of a (16, 16) array with P(('data', 'model')) on a (2, 4) mesh",
   "element (9, 7) of a (16, 16) array with P(('data', 'model')) on a (2, 4) mesh",
   "element (3, 14) of a (16, 16) array with P(('data', 'model')) on a (2, 4) mesh",
   "element (15, 7) of a (16, 16) array with P(('data', 'model')) on a (2, 4) mesh",
   "element (0, 0) of a (16, 16) array with P(('model', 'data'), None) on a (2, 4) mesh",
   "element (15, 1) of a (16, 16) array with P(('model', 'data'), None) on a (2, 4) mesh",
   "element (9, 7) of a (16, 16) array with P(('model', 'data'), None) on a (2, 4) mesh",
   "element (3, 14) of a (16, 16) array with P(('model', 'data'), None) on a (2, 4) mesh",
   "element (15, 15) of a (16, 16) array with P(('model', 'data'), None) on a (2, 4) mesh",
   "element (0, 0) of a (16, 16) array with P('data') on a (4, 2) mesh of devices 7, 3, 1, 4, 5, 0, 2, 6",
   "element (15, 1) of a (16, 16) array with P('data') on a (4, 2) mesh of devices 7, 3, 1, 4, 5, 0, 2, 6",
   "element (9, 7) of a (16, 16) array with P('data') on a (4, 2) mesh of devices 7, 3, 1, 4, 5, 0, 2, 6",
   "element (3, 14) of a (16, 16) array with P('data') on a (4, 2) mesh of devices 7, 3, 1, 4, 5, 0, 2, 6",
   "element (12, 8) of a (16, 16) array with P('data') on a (4, 2) mesh of devices 7, 3, 1, 4, 5, 0, 2, 6",
   "element (0, 0) of a (16, 16) array with P('model') on a (4, 2) mesh of devices 7, 3, 1, 4, 5, 0, 2, 6",
   "element (15, 1) of a (16, 16) array with P('model') on a (4, 2) mesh of devices 7, 3, 1, 4, 5, 0, 2, 6",
   "element (9, 7) of a (16, 16) array with P('model') on a (4, 2) mesh of devices 7, 3, 1, 4, 5, 0, 2, 6",
   "element (3, 14) of a (16, 16) array with P('model') on a (4, 2) mesh of devices 7, 3, 1, 4, 5, 0, 2, 6",
   "element (10, 3) of a (16, 16) array with P('model') on a (4, 2) mesh of devices 7, 3, 1, 4, 5, 0, 2, 6",
   "element (0, 0) of a (16, 16) array with P() on a (4, 2) mesh of devices 7, 3, 1, 4, 5, 0, 2, 6",
   "element (15, 1) of a (16, 16) array with P() on a (4, 2) mesh of devices 7, 3, 1, 4, 5, 0, 2, 6",
   "element (9, 7) of a (16, 16) array with P() on a (4, 2) mesh of devices 7, 3, 1, 4, 5, 0, 2, 6",
   "element (3, 14) of a (16, 16) array with P() on a (4, 2) mesh of devices 7, 3, 1, 4, 5, 0, 2, 6",
   "element (2, 1) of a (16, 16) array with P() on a (4, 2) mesh of devices 7, 3, 1, 4, 5, 0, 2, 6",
   "element (0, 0) of a (16, 16) array with P('data', 'model') on a (4, 2) mesh of devices 7, 3, 1, 4, 5, 0, 2, 6",
   "element (15, 1) of a (16, 16) array with P('data', 'model') on a (4, 2) mesh of devices 7, 3, 1, 4, 5, 0, 2, 6",
   "element (9, 7) of a (16, 16) array with P('data', 'model') on a (4, 2) mesh of devices 7, 3, 1, 4, 5, 0, 2, 6",
   "element (3, 14) of a (16, 16) array with P('data', 'model') on a (4, 2) mesh of devices 7, 3, 1, 4, 5, 0, 2, 6",
   "element (0, 9) of a (16, 16) array with P('data', 'model') on a (4, 2) mesh of devices 7, 3, 1, 4, 5, 0, 2, 6",
   "element (0, 0) of a (16, 16) array with P('model', 'data') on a (4, 2) mesh of devices 7, 3, 1, 4, 5, 0, 2, 6",
   "element (15, 1) of a (16, 16) array with P('model', 'data') on a (4, 2) mesh of devices 7, 3, 1, 4, 5, 0, 2, 6",
   "element (9, 7) of a (16, 16) array with P('model', 'data') on a (4, 2) mesh of devices 7, 3, 1, 4, 5, 0, 2, 6",
   "element (3, 14) of a (16, 16) array with P('model', 'data') on a (4, 2) mesh of devices 7, 3, 1, 4, 5, 0, 2, 6",
   "element (11, 1) of a (16, 16) array with P('model', 'data') on a (4, 2) mesh of devices 7, 3, 1, 4, 5, 0, 2, 6",
   "element (0, 0) of a (16, 16) array with P(None, 'model') on a (4, 2) mesh of devices 7, 3, 1, 4, 5, 0, 2, 6",
   "element (15, 1) of a (16, 16) array with P(None, 'model') on a (4, 2) mesh of devices 7, 3, 1, 4, 5, 0, 2, 6",
   "element (9, 7) of a (16, 16) array with P(None, 'model') on a (4, 2) mesh of devices 7, 3, 1, 4, 5, 0, 2, 6",
   "element (3, 14) of a (16, 16) array with P(None, 'model') on a (4, 2) mesh of devices 7, 3, 1, 4, 5, 0, 2, 6",
   "element (8, 14) of a (16, 16) array with P(None, 'model') on a (4, 2) mesh of devices 7, 3, 1, 4, 5, 0, 2, 6",
   "element (0, 0) of a (16, 16) array with P(('data', 'model')) on a (4, 2) mesh of devices 7, 3, 1, 4, 5, 0, 2, 6",
   "element (15, 1) of a (16, 16) array with P(('data', 'model')) on a (4, 2) mesh of devices 7, 3, 1, 4, 5, 0, 2, 6",
   "element (9, 7) of a (16, 16) array with P(('data', 'model')) on a (4, 2) mesh of devices 7, 3, 1, 4, 5, 0, 2, 6",
   "element (3, 14) of a (16, 16) array with P(('data', 'model')) on a (4, 2) mesh of devices 7, 3, 1, 4, 5, 0, 2, 6",
   "element (11, 15) of a (16, 16) array with P(('data', 'model')) on a (4, 2) mesh of devices 7, 3, 1, 4, 5, 0, 2, 6",
   "element (0, 0) of a (16, 16) array with P(('model', 'data'), None) on a (4, 2) mesh of devices 7, 3, 1, 4, 5, 0, 2, 6",
   "element (15, 1) of a (16, 16) array with P(('model', 'data'), None) on a (4, 2) mesh of devices 7, 3, 1, 4, 5, 0, 2, 6",
   "element (9, 7) of a (16, 16) array with P(('model', 'data'), None) on a (4, 2) mesh of devices 7, 3, 1, 4, 5, 0, 2, 6",
   "element (3, 14) of a (16, 16) array with P(('model', 'data'), None) on a (4, 2) mesh of devices 7, 3, 1, 4, 5, 0, 2, 6",
   "element (11, 7) of a (16, 16) array with P(('model', 'data'), None) on a (4, 2) mesh of devices 7, 3, 1, 4, 5, 0, 2, 6"
  ],
  "expected": [
   [
    0,
    1
   ],
   [
    6,
    7
   ],
   [
    4,
    5
   ],
   [
    0,
    1
   ],
   [
    0,
    1
   ],
   [
    0,
    2,
    4,
    6
   ],
   [
    1,
    3,
    5,
    7
   ],
   [
    1,
    3,
    5,
    7
   ],
   [
    0,
    2,
    4,
    6
   ],
   [
    1,
    3,
    5,
    7
   ],
   [
    0,
    1,
    2,
    3,
    4,
    5,
    6,
    7
   ],
   [
    0,
    1,
    2,
    3,
    4,
    5,
    6,
    7
   ],
   [
    0,
    1,
    2,
    3,
    4,
    5,
    6,
    7
   ],
   [
    0,
    1,
    2,
    3,
    4,
    5,
    6,
    7
   ],
   [
    0,
    1,
    2,
    3,
    4,
    5,
    6,
    7
   ],
   [
    0
   ],
   [
    6
   ],
   [
    4
   ],
   [
    1
   ],
   [
    1
   ],
   [
    0
   ],
   [
    1
   ],
   [
    3
   ],
   [
    6
   ],
   [
    0
   ],
   [
    0,
    2,
    4,
    6
   ],
   [
    0,
    2,
    4,
    6
   ],
   [
    0,
    2,
    4,
    6
   ],
   [
    1,
    3,
    5,
    7
   ],
   [
    0,
    2,
    4,
    6
   ],
   [
    0
   ],
   [
    7
   ],
   [
    4
   ],
   [
    1
   ],
   [
    5
   ],
   [
    0
   ],
   [
    7
   ],
   [
    1
   ],
   [
    2
   ],
   [
    3
   ],
   [
    0,
    1,
    2,
    3
   ],
   [
    4,
    5,
    6,
    7
   ],
   [
    4,
    5,
    6,
    7
   ],
   [
    0,
    1,
    2,
    3
   ],
   [
    4,
    5,
    6,
    7
   ],
   [
    0,
    4
   ],
   [
    3,
    7
   ],
   [
    2,
    6
   ],
   [
    0,
    4
   ],
   [
    1,
    5
   ],
   [
    0,
    1,
    2,
    3,
    4,
    5,
    6,
    7
   ],
   [
    0,
    1,
    2,
    3,
    4,
    5,
    6,
    7
   ],
   [
    0,
    1,
    2,
    3,
    4,
    5,
    6,
    7
   ],
   [
    0,
    1,
    2,
    3,
    4,
    5,
    6,
    7
   ],
   [
    0,
    1,
    2,
    3,
    4,
    5,
    6,
    7
   ],
   [
    0
   ],
   [
    4
   ],
   [
    5
   ],
   [
    3
   ],
   [
    2
   ],
   [
    0
   ],
   [
    3
   ],
   [
    2
   ],
   [
    4
   ],
   [
    6
   ],
   [
    0,
    4
   ],
   [
    0,
    4
   ],
   [
    1,
    5
   ],
   [
    3,
    7
   ],
   [
    2,
    6
   ],
   [
    0
   ],
   [
    7
   ],
   [
    4
   ],
   [
    1
   ],
   [
    7
   ],
   [
    0
   ],
   [
    7
   ],
   [
    2
   ],
   [
    4
   ],
   [
    7
   ],
   [
    3,
    7
   ],
   [
    2,
    6
   ],
   [
    0,
    5
   ],
   [
    3,
    7
   ],
   [
    2,
    6
   ],
   [
    1,
    2,
    5,
    7
   ],
   [
    0,
    3,
    4,
    6
   ],
   [
    0,
    3,
    4,
    6
   ],
   [
    1,
    2,
    5,
    7
   ],
   [
    0,
    3,
    4,
    6
   ],
   [
    0,
    1,
    2,
    3,
    4,
    5,
    6,
    7
   ],
   [
    0,
    1,
    2,
    3,
    4,
    5,
    6,
    7
   ],
   [
    0,
    1,
    2,
    3,
    4,
    5,
    6,
    7
   ],
   [
    0,
    1,
    2,
    3,
    4,
    5,
    6,
    7
   ],
   [
    0,
    1,
    2,
    3,
    4,
    5,
    6,
    7
   ],
   [
    7
   ],
   [
    2
   ],
   [
    5
   ],
   [
    3
   ],
   [
    3
   ],
   [
    7
   ],
   [
    3
   ],
   [
    4
   ],
   [
    2
   ],
   [
    3
   ],
   [
    1,
    2,
    5,
    7
   ],
   [
    1,
    2,
    5,
    7
   ],
   [
    1,
    2,
    5,
    7
   ],
   [
    0,
    3,
    4,
    6
   ],
   [
    0,
    3,
    4,
    6
   ],
   [
    7
   ],
   [
    6
   ],
   [
    5
   ],
   [
    3
   ],
   [
    0
   ],
   [
    7
   ],
   [
    6
   ],
   [
    3
   ],
   [
    1
   ],
   [
    4
   ]
  ]
 },
 "06.allreduce_bytes": {
  "cases": [
   "the model, one device",
   "the model, all devices on 'data'",
   "the model, a (data, model) mesh, batch on 'data'",
   "the model, the same mesh, batch on both axes",
   "the model, the same mesh, batch replicated",
   "a model 82 wide, one device",
   "a model 82 wide, all devices on 'data'",
   "a model 82 wide, a (data, model) mesh, batch on 'data'",
   "a model 82 wide, the same mesh, batch on both axes",
   "a model 82 wide, the same mesh, batch replicated"
  ],
  "expected": [
   0.0,
   2485.0,
   2130.0,
   2485.0,
   0.0,
   0.0,
   3465.0,
   2970.0,
   3465.0,
   0.0
  ]
 },
 "07.epoch_ms": {
  "cases": [
   "12 steps of 20 ms, batches of 15 ms, without prefetch",
   "12 steps of 20 ms, batches of 15 ms, with prefetch",
   "12 steps of 5 ms, batches of 15 ms, without prefetch",
   "12 steps of 5 ms, batches of 15 ms, with prefetch",
   "1000 steps of 30 ms, batches of 50 ms, without prefetch",
   "1000 steps of 30 ms, batches of 50 ms, with prefetch",
   "3 steps of 10 ms, batches of 10 ms, without prefetch",
   "3 steps of 10 ms, batches of 10 ms, with prefetch",
   "1 steps of 7 ms, batches of 2 ms, without prefetch",
   "1 steps of 7 ms, batches of 2 ms, with prefetch",
   "59 steps of 38.5 ms, batches of 10 ms, without prefetch",
   "59 steps of 38.5 ms, batches of 10 ms, with prefetch",
   "9 steps of 43 ms, batches of 19.5 ms, without prefetch",
   "9 steps of 43 ms, batches of 19.5 ms, with prefetch",
   "22 steps of 24.5 ms, batches of 21.5 ms, without prefetch",
   "22 steps of 24.5 ms, batches of 21.5 ms, with prefetch"
  ],
  "expected": [
   420.0,
   255.0,
   240.0,
   185.0,
   80000.0,
   50030.0,
   60.0,
   40.0,
   9.0,
   9.0,
   2861.5,
   2281.5,
   562.5,
   406.5,
   1012.0,
   560.5
  ]
 },
 "07.received_block": {
  "cases": [
   "a (256, 224, 224, 3) leaf over 8 device(s)",
   "a (256,) leaf over 8 device(s)",
   "a (256, 10) leaf over 8 device(s)",
   "a (64, 3, 32, 32) leaf over 4 device(s)",
   "a (8, 2, 2, 2) leaf over 8 device(s)",
   "a (16, 5, 7) leaf over 1 device(s)",
   "a (72,) leaf over 2 device(s)",
   "a (94, 19) leaf over 2 device(s)",
   "a (328, 17, 31, 30) leaf over 8 device(s)"
  ],
  "expected": [
   [
    32,
    150528
   ],
   [
    32
   ],
   [
    32,
    10
   ],
   [
    16,
    3072
   ],
   [
    1,
    8
   ],
   [
    16,
    35
   ],
   [
    36
   ],
   [
    47,
    19
   ],
   [
    41,
    15810
   ]
  ]
 },
 "10.communication_bound_batch": {
  "cases": [
   "a TPU v5e-8 ring at 2 x 45 GB/s, bfloat16 gradients",
   "a TPU v5e-8 ring at 2 x 50 GB/s, bfloat16 gradients",
   "8 H100 over NVLink, bfloat16 gradients",
   "64 devices, float32 gradients",
   "2 devices given as numpy numbers",
   "one device, which sends nothing",
   "385 devices at 9.93e+14 FLOP/s sending 1.88e+11 bytes/s",
   "416 devices at 1.3e+13 FLOP/s sending 8.1e+11 bytes/s",
   "252 devices at 4.97e+14 FLOP/s sending 3.65e+11 bytes/s"
  ],
  "expected": [
   1915.2777777777778,
   1723.75,
   1923.0555555555557,
   3937.5,
   49.9999997952,
   0.0,
   5268.195634153081,
   32.02160493827161,
   1356.240487062405
  ]
 }
}
"""
)
